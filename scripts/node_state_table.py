"""Measure which node attributes set at run time (`scontrol update`) survive `scontrol reconfigure`
or a slurmctld restart, on real Slurm, per release and cluster shape, and print the table
docs/node-state.md holds.

    .venv/bin/python scripts/node_state_table.py                 # every release, both shapes
    .venv/bin/python scripts/node_state_table.py sid:slinky host:classic
    .venv/bin/python scripts/node_state_table.py sid:classic:restart sid:classic:clean

The third word is what happens to slurmctld: `reconfigure` (the default), `restart` (`scontrol
shutdown`, which saves its state, then a start on the same StateSaveLocation, as a container restart
does), `clean` (the same, with StateSaveLocation emptied before the start: a pod that lost it) or
`takeover` (two controllers; `scontrol takeover` hands control to the backup, which reads the state
the primary saved).

Each run starts a dev cluster of four nodes, sets on them (as an admin or a tool would):
n1 AvailableFeatures/ActiveFeatures, Weight, Comment, Extra, Gres (a count below the configured one)
and, on 25.05+, a topology placement; n2 a drain with our reason; n3 a drain with an admin's; n4
DOWN with a reason. It reads every value back (`scontrol show node -o`), runs `scontrol reconfigure`,
waits until every slurmd registered again after it (23.11+: SlurmdStartTime at or past the
reconfigure; 22.05 reconfigures slurmd in place) and slurmctld has settled (`SETTLE_SECONDS`), and
reads again. A value is "kept" when it reads the same, "lost" when not (the value it fell back to is
shown), "refused" when `scontrol update` refused it, "n/a" when the release has no such key.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shutil
import sys
import time

from sidecars.devcluster import ClusterSpec, DevCluster
from sidecars.devcluster.release import available_releases
from sidecars.protocol.drains import REASON_PREFIX
from sidecars.slurm import SlurmClient, SlurmCommandError

SETTLE_SECONDS = 5.0  # after the last registration: a late registration's overwrite shows by then
REGISTER_SECONDS = 120.0
TOPOLOGY = """---
- topology: kube
  cluster_default: true
  tree:
    switches:
      - switch: kube
"""
OUR_REASON = f"{REASON_PREFIX} measured drain"
ADMIN_REASON = "admin: bad dimm"
DOWN_REASON = "admin: down for repair"
# row -> (node, scontrol update words, keys read back)
ROWS: dict[str, tuple[str, list[str], tuple[str, ...]]] = {
    "features": (
        "n1",
        ["AvailableFeatures=x,rt", "ActiveFeatures=rt"],
        ("AvailableFeatures", "ActiveFeatures"),
    ),
    "weight": ("n1", ["Weight=77"], ("Weight",)),
    "comment": ("n1", ["Comment=rt-comment"], ("Comment",)),
    "extra": ("n1", ["Extra=rt-extra"], ("Extra",)),
    "gres": ("n1", ["Gres=gpu:1"], ("Gres",)),
    "topology": ("n1", ["Topology=kube:kube:a:a/r1"], ("Topology",)),
    "drain (ours)": ("n2", ["State=DRAIN", f"Reason={OUR_REASON}"], ("State", "Reason")),
    "drain (admin)": ("n3", ["State=DRAIN", f"Reason={ADMIN_REASON}"], ("State", "Reason")),
    "down (admin)": ("n4", ["State=DOWN", f"Reason={DOWN_REASON}"], ("State", "Reason")),
}
_WORD = re.compile(r"(?:^| )([A-Za-z]+)=")


def parse_node_line(line: str) -> dict[str, str]:
    """One `scontrol show node -o` line -> key -> value; a value runs to the next ` Key=` (Reason
    has spaces; its trailing `[user@time]` is cut)."""
    marks = [(m.group(1), m.start(1), m.end()) for m in _WORD.finditer(line)]
    out: dict[str, str] = {}
    for i, (key, _, end) in enumerate(marks):
        stop = marks[i + 1][1] - 1 if i + 1 < len(marks) else len(line)
        out[key] = line[end:stop].strip()
    if "Reason" in out:
        out["Reason"] = re.sub(r"\s*\[[^\]]*\]$", "", out["Reason"])
    return out


async def read(client: SlurmClient) -> dict[str, dict[str, str]]:
    out = (await client.run("scontrol", "show", "node", "-o")).stdout
    nodes = (parse_node_line(line) for line in out.splitlines() if line.startswith("NodeName="))
    return {n["NodeName"]: n for n in nodes}


def shown(node: dict[str, str], keys: tuple[str, ...]) -> str:
    return " ".join(f"{k}={node.get(k, '-')}" for k in keys)


async def registered_after(client: SlurmClient, since: float, slurmd_restarts: bool) -> None:
    deadline = time.monotonic() + REGISTER_SECONDS
    while time.monotonic() < deadline:
        try:
            nodes = await client.nodes()
        except SlurmCommandError:
            nodes = []
        if nodes and all(
            "not_responding" not in n.state.flags
            and (not slurmd_restarts or (n.slurmd_start_time or 0) >= int(since))
            for n in nodes
        ):
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"the nodes did not register within {REGISTER_SECONDS} s of the reconfigure")


async def restart(cluster: DevCluster, *, clean: bool) -> None:
    await cluster.stop_slurmctld()
    if clean:
        state = cluster.dir / "state"
        for path in state.iterdir():
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    await cluster.start_slurmctld()


async def measure(cluster: DevCluster, how: str = "reconfigure") -> dict[str, str]:
    client = cluster.client(timeout=30.0)
    verdicts: dict[str, str] = {}
    want: dict[str, str] = {}
    for row, (node, words, _) in ROWS.items():
        try:
            await client.run("scontrol", "update", f"NodeName={node}", *words)
        except SlurmCommandError as exc:
            verdicts[row] = f"refused ({exc.message.split(': ')[-1]})"
    before = await read(client)
    for row, (node, _, keys) in ROWS.items():
        if row in verdicts:
            continue
        if any(k not in before[node] for k in keys):
            verdicts[row] = "n/a"
            continue
        want[row] = shown(before[node], keys)
    since = time.time()
    version = tuple(int(x) for x in cluster.release.version.split(".")[:2])
    if how == "takeover":
        await cluster.takeover("ctld-b")
        await registered_after(client, since, slurmd_restarts=False)
    elif how == "reconfigure":
        await client.reconfigure()
        await registered_after(client, since, slurmd_restarts=version >= (23, 11))
    else:  # a restart leaves every slurmd running: it registers with the new slurmctld
        await restart(cluster, clean=how == "clean")
        try:
            await registered_after(client, since, slurmd_restarts=False)
        except TimeoutError as exc:  # measured: a dynamic node without saved state is not known again
            print(f"- note: {exc}", flush=True)
    await asyncio.sleep(SETTLE_SECONDS)
    after = await read(client)
    for row, value in want.items():
        node, _, keys = ROWS[row]
        if node not in after:
            verdicts[row] = "lost (the node is not known to slurmctld)"
            continue
        now = shown(after[node], keys)
        verdicts[row] = "kept" if now == value else f"lost (set: {value}; after: {now})"
    return verdicts


async def one(release_name: str, shape: str, how: str) -> tuple[str, dict[str, str]]:
    found, missing = await available_releases(build=True)
    release = next((r for r in found if r.name == release_name), None)
    if release is None:
        raise SystemExit(f"release {release_name} unavailable: {missing}")
    spec = ClusterSpec(nodes=4, gpus=2, shape=shape, files={"topology.yaml": TOPOLOGY})
    if how == "takeover":
        spec = dataclasses.replace(spec, controllers=2, slurmctld_timeout_seconds=5)
    async with DevCluster(release, spec) as cluster:
        return release.version, await measure(cluster, how)


async def main(argv: list[str]) -> None:
    wanted = argv or ["host:classic", "chroot:classic", "chroot:slinky", "sid:classic", "sid:slinky"]
    for item in wanted:
        name, shape, how = [*item.split(":"), "reconfigure"][:3]
        version, verdicts = await one(name, shape, how)
        print(f"## Slurm {version}, {shape}, {how}", flush=True)
        for row, verdict in verdicts.items():
            print(f"- {row}: {verdict}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
