"""U1: a whole-cluster Slurm upgrade 24.11 -> 26.05 of a cluster with running jobs, on real daemons.

Both runs start alike: a dev cluster of 24.11 with accounting (MariaDB + slurmdbd), 3 workers of 2
CPUs, 6 running jobs (each runs until the bench says "go") and 10 held pending jobs.

- ours: the control plane's stage machine (sidecars/controlplane/changes/cluster_upgrade.py) with the
  dev cluster's roles: preflight, slurmdbd (backup, then the new one), slurmctld (state copy, the new
  one on the same state, verified), the workers one at a time, drained first. "go" is given when the
  workers' stage starts (the roll waits for the jobs, as it does in production).
- baseline: what a naive image bump of every role at once does: every daemon stopped together, the
  worker pods' processes (slurmd, slurmstepd, the jobs) gone with their pods, then every daemon of
  the new release started together. "go" is given once the cluster answers again.

Measured in each: seconds per stage, the longest time slurmctld did not answer `scontrol ping`
(polled every 50 ms), and the jobs lost (a job of before that did not end COMPLETED, or vanished).
Slurm's own restart time, the reference of the goal, is the median of three restarts of the
26.05 slurmctld (the release the upgrade starts) on the upgraded cluster, seen by the same poll;
the median of three restarts of the 24.11 one before the upgrade is printed beside it. Goal: 0 jobs
lost; slurmctld unanswered for less than 2x Slurm's own restart.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

from _report import result

from sidecars.controlplane.changes.cluster_upgrade import ClusterUpgrade
from sidecars.devcluster import ClusterSpec, Release
from sidecars.devcluster.release import build_chroot
from sidecars.devcluster.swap import SwappableCluster
from sidecars.devcluster.swap_roles import DevClusterRoles
from sidecars.runtime import logs
from sidecars.slurm import Version

IMAGES = {"slurmdbd": "sid", "slurmctld": "sid", "slurmd": "sid"}
POLL_SECONDS = 0.05
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL"}


class Unanswered:
    """Polls `scontrol ping` and keeps the longest stretch without an answer."""

    def __init__(self, cluster: SwappableCluster) -> None:
        self.cluster = cluster
        self.longest = 0.0
        self._since: float | None = None

    async def watch(self) -> None:
        while True:
            try:
                up = (await self.cluster.client(timeout=2.0).ping()).up
            except Exception:  # a shim of a daemon being swapped: not an answer either
                up = False
            now = time.monotonic()
            if up and self._since is not None:
                self.longest = max(self.longest, now - self._since)
                self._since = None
            elif not up and self._since is None:
                self._since = now
            await asyncio.sleep(POLL_SECONDS)

    @contextlib.asynccontextmanager
    async def watching(self):  # type: ignore[no-untyped-def]
        self.longest, self._since = 0.0, None
        task = asyncio.create_task(self.watch(), name="bench-u1-ping")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def prepare(
    c: SwappableCluster, running: int, pending: int, bulk: int = 0
) -> tuple[list[int], list[int]]:
    go = c.out_dir / "go"
    jobs = [await c.sbatch(wrap=f"while [ ! -e {go} ]; do sleep 0.2; done") for _ in range(running)]
    for j in jobs:
        await c.wait_job(j, "RUNNING", timeout=60)
    held = [await c.sbatch("--hold", wrap="true") for _ in range(pending)]
    held += await c.submit_held(bulk)  # a larger state: a busy cluster's queue
    return jobs, held


async def restart_reference(c: SwappableCluster, times: int = 3) -> float:
    """Slurm's own restart: the controller stopped and started again on the release it runs (the
    median of `times`: one restart on a shared machine is noise)."""
    gaps = []
    for _ in range(times):
        watch = Unanswered(c)
        async with watch.watching():
            await c.restart_slurmctld()
            await asyncio.sleep(POLL_SECONDS * 4)  # the poll's next answer closes the stretch
        gaps.append(watch.longest)
    return sorted(gaps)[len(gaps) // 2]


async def lost(c: SwappableCluster, running: list[int], held: list[int]) -> int:
    """Jobs of before that did not end COMPLETED (the running ones) or vanished (the held ones)."""
    (c.out_dir / "go").touch()
    client = c.client(timeout=60.0)  # thousands of jobs listed on a loaded machine
    # a job alive ends within a second of "go"; a killed one may be listed RUNNING for minutes
    # (until slurmctld notices its node lost it): 30 s, then whatever is not COMPLETED is lost
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        jobs = {j.job_id: j.state for j in await client.jobs()}
        if not any(jobs.get(j) in ("RUNNING", "COMPLETING", "PENDING") for j in running):
            break
        await asyncio.sleep(0.2)
    jobs = {j.job_id: j.state for j in await client.jobs()}
    # a job of before that slurmctld no longer lists (its state lost), or listed as ended otherwise
    gone = [j for j in running if jobs.get(j) != "COMPLETED"]
    vanished = [j for j in held if j not in jobs]
    return len(gone) + len(vanished)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""  # ended while looked at


def _descendants(roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    found, todo = set(roots), list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


async def naive(c: SwappableCluster, new: Release) -> dict[str, float]:
    """Every role's image bumped at once: all stopped together (the worker pods' processes with
    them), then all of the new release started together."""
    began = time.monotonic()
    pods = {p for p in c.processes() if _comm(p) in ("slurmd", "slurmstepd")}
    for pid in _descendants(pods):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    await asyncio.gather(c.stop_slurmctld(), c.stop_slurmdbd())
    stopped = time.monotonic()
    for name in c.node_names:
        c.releases[f"slurmd-{name}"] = new
    c.releases["slurmdbd"] = new

    async def workers() -> None:
        await asyncio.gather(*(c.start_slurmd(n) for n in c.node_names))

    await asyncio.gather(c.start_slurmdbd(timeout=180), c.start_slurmctld_of(new), workers())
    await c.wait_nodes(lambda ns: all(n.state.registered for n in ns), timeout=120, what="every worker back")
    return {"stop": stopped - began, "start": time.monotonic() - stopped}


async def run(old: Release, new: Release, running: int, pending: int, bulk: int) -> None:
    spec = ClusterSpec(
        nodes=3, cpus=2, accounting=True, foreground_ctld=True, max_job_count=max(10_000, 2 * bulk)
    )
    target = Version.parse(new.version)

    async with SwappableCluster(old, spec) as c:
        jobs, held = await prepare(c, running, pending, bulk)
        reference = await restart_reference(c)
        roles = DevClusterRoles(c, {"chroot": old, "sid": new})

        async def go_at_workers(stage: str, state: str, message: str) -> None:
            if (stage, state) == ("workers", "running"):
                (c.out_dir / "go").touch()

        up = ClusterUpgrade(roles, target, IMAGES, emit=go_at_workers)
        watch = Unanswered(c)
        async with watch.watching():
            began = time.monotonic()
            final = await up.run()
            total = time.monotonic() - began
        ours_lost = await lost(c, jobs, held)
        new_reference = await restart_reference(c)  # 26.05's own restart, on the upgraded cluster
        stages = {s.name: s.seconds or 0.0 for s in up.status.stages}
        ours_gap = watch.longest
    print(
        f"ours: {final} in {total:.1f} s; "
        + ", ".join(f"{k} {v:.1f} s" for k, v in stages.items())
        + f"; slurmctld unanswered {ours_gap:.2f} s (the machine's own count: "
        f"{up.status.slurmctld_unanswered_seconds} s); {ours_lost} jobs lost"
    )

    async with SwappableCluster(old, spec) as c:
        jobs, held = await prepare(c, running, pending, bulk)
        watch = Unanswered(c)
        async with watch.watching():
            began = time.monotonic()
            phases = await naive(c, new)
            base_total = time.monotonic() - began
        base_lost = await lost(c, jobs, held)
        base_gap = watch.longest
    print(
        f"baseline: {base_total:.1f} s (stop {phases['stop']:.1f} s, start {phases['start']:.1f} s); "
        f"slurmctld unanswered {base_gap:.2f} s; {base_lost} jobs lost"
    )
    print(
        f"Slurm's own restart of slurmctld (median of 3): 24.11 {reference:.2f} s, "
        f"26.05 {new_reference:.2f} s"
    )
    result(
        "U1",
        f"upgrade 24.11 -> 26.05, {running} running + {pending + bulk} pending jobs: "
        "jobs lost, slurmctld unanswered",
        f"{ours_lost} lost, unanswered {ours_gap:.2f} s; stages "
        + ", ".join(f"{k} {v:.1f} s" for k, v in stages.items()),
        f"{base_lost} lost, unanswered {base_gap:.2f} s, {base_total:.1f} s "
        "(everything stopped, then started)",
        f"0 lost, unanswered < 2x Slurm's own restart (26.05: {new_reference:.2f} s)",
        final == "complete" and ours_lost == 0 and ours_gap < 2 * new_reference,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--running", type=int, default=6, help="running jobs (the cluster has 6 CPUs)")
    p.add_argument("--pending", type=int, default=10, help="held pending jobs")
    p.add_argument(
        "--bulk-held", type=int, default=0, help="more held jobs, submitted in bulk (a larger state)"
    )
    args = p.parse_args()
    logs.configure(json=False, level="warning")

    async def go() -> None:
        old, new = await build_chroot(name="chroot"), await build_chroot(name="sid")
        await run(old, new, args.running, args.pending, args.bulk_held)

    asyncio.run(go())


if __name__ == "__main__":
    main()
