"""A rolling upgrade on real Slurm with the fake Kubernetes playing a StatefulSet with OnDelete:
never more than the budget out of service, idle workers first, no job killed, a restart mid-roll
losing nothing, and bad starts (budget 0, version skew) refused with nothing written."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sidecars.controlplane.changes.upgrade import CONFIG_MAP
from sidecars.devcluster import DevCluster
from sidecars.protocol.drains import UPGRADE as REASON_PREFIX
from sidecars.runtime.waits import within
from sidecars.slurm import Version
from tests.controlplane.changes.paced import (
    complete_once_long_ends,
    idle_first_then_soonest,
    long_and_soon,
    n1_next_once_soon_ends,
)
from tests.controlplane.conftest import TOKEN, control_plane, eventually
from tests.fakekube import FakeKube
from tests.helpers import in_background

pytestmark = [pytest.mark.releases("slurm24", "slurm26"), pytest.mark.cluster(nodes=4)]
REASON = REASON_PREFIX + "new"
WORKERS = {f"worker-{i}": f"n{i}" for i in range(1, 5)}
CLI = str(Path(sys.executable).parent / "slurm-sidecars")


def add_worker(fake: FakeKube, pod: str, revision: str) -> None:
    fake.add_pod(
        pod,
        hostname=WORKERS[pod],
        labels={"app": "slurmd", "controller-revision-hash": revision},
        owner_kind="StatefulSet",
    )


@contextlib.asynccontextmanager
async def statefulset_on_delete(fake: FakeKube) -> AsyncIterator[list[str]]:
    """What the StatefulSet controller does with OnDelete: a deleted pod comes back on the new revision."""
    replaced: list[str] = []
    known = {pod: WORKERS[pod] for _, pod in fake.pods}

    async def run() -> None:
        while True:
            for pod, node in known.items():
                if ("slurm", pod) not in fake.pods:
                    await asyncio.sleep(0.3)  # the new pod takes a moment to be scheduled
                    add_worker(fake, pod, "new")
                    replaced.append(node)
            await asyncio.sleep(0.05)

    async with in_background(run(), "statefulset"):
        yield replaced


@pytest.mark.per_release("each release's slurmd leaving and re-registering with jobs on the nodes")
async def test_an_upgrade_keeps_to_its_budget_kills_no_job_and_survives_a_restart(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    for pod in WORKERS:
        add_worker(fake, pod, "old")
    client = cluster.client()
    long, soon = await long_and_soon(cluster)
    held: list[set[str]] = []  # what the upgrade held at each sample: drained by it, or pod missing

    async def watch_budget() -> None:
        while True:
            drained = {
                n.name for n in await client.nodes() if n.state.drain and n.reason and n.reason.text == REASON
            }
            missing = {node for pod, node in WORKERS.items() if ("slurm", pod) not in fake.pods}
            held.append(drained | missing)
            await asyncio.sleep(0.1)

    watcher = asyncio.create_task(watch_budget(), name="budget-watch")
    try:
        async with statefulset_on_delete(fake) as replaced:
            async with control_plane(cluster, kube_url=url) as cp:
                for body, code, words in (
                    ({"revision": "new", "budget": "0"}, 422, "budget of 0"),
                    ({"revision": "new", "budget": "x"}, 422, "budget"),
                    (
                        {"revision": "new", "budget": "1", "slurm_version": "99.05"},
                        409,
                        "newer than slurmctld",
                    ),
                    ({"revision": "new", "budget": "1", "slurm_version": "20.11"}, 409, "releases behind"),
                    ({"revision": "new!", "budget": "1"}, 422, "revision"),
                ):
                    status, text = await cp.post("/v1/upgrade", body)
                    assert status == code and words in text, (body, status, text)
                assert fake.config_maps == {} and not replaced  # refused: nothing written, nothing moved
                status, text = await cp.post("/v1/upgrade", {"revision": "new", "budget": "1"})
                assert status == 201, text
                # idle workers first, one at a time; then the one whose job ends soonest
                await idle_first_then_soonest(cluster, cp, replaced, soon)
            # restarted mid-roll: the plan is read back from the ConfigMap
            assert fake.config_maps[("slurm", CONFIG_MAP)]["data"]["revision"] == "new"
            async with control_plane(cluster, kube_url=url, identity="cp-b") as cp:
                status, report = await cp.get("/v1/upgrade")
                assert report["upgrade"]["revision"] == "new" and report["upgrade"]["upgraded"] == 2
                await n1_next_once_soon_ends(cluster, soon)
                assert (await cluster.wait_job(long, "RUNNING")).state == "RUNNING"
                await complete_once_long_ends(cluster, cp, long)
                assert sorted(replaced) == ["n1", "n2", "n3", "n4"] and replaced[2] == "n2"
                assert not any(n.state.drain for n in await client.nodes())
        # each worker's pod was told, in its turn, as a Kubernetes Event
        told = [
            (e["reason"], e["involvedObject"]["name"])
            for e in fake.events
            if e["reason"].startswith("Upgrade")
        ]
        assert [p for r, p in told if r == "UpgradeDraining"] == [f"worker-{n[1:]}" for n in replaced]
        assert sorted(p for r, p in told if r == "UpgradeReplacing") == sorted(WORKERS)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    assert held and max(len(h) for h in held) == 1, max(held, key=len)


@pytest.mark.cluster(nodes=2)
async def test_the_upgrade_command_starts_pauses_and_resumes_and_refuses_a_zero_budget(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str], tmp_path: Path
) -> None:
    fake, url = fake_kube
    for pod in ("worker-1", "worker-2"):
        add_worker(fake, pod, "old")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    client = cluster.client()
    first = await cluster.sbatch("-w", "n1", "-t", "5", wrap="sleep 300")
    second = await cluster.sbatch("-w", "n2", "-t", "30", wrap="sleep 300")
    await cluster.wait_job(first, "RUNNING")
    await cluster.wait_job(second, "RUNNING")
    async with statefulset_on_delete(fake) as replaced, control_plane(cluster, kube_url=url) as cp:
        base = ["--control-plane", cp.url, "--token-file", str(token)]

        async def run(*args: str) -> tuple[int, str, str]:
            proc = await asyncio.create_subprocess_exec(
                CLI, "upgrade", *args, *base, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await within(proc.communicate(), 30)
            assert proc.returncode is not None
            return proc.returncode, out.decode(), err.decode()

        code, out, err = await run("start", "--revision", "new", "--upgrade-budget", "0")
        assert code == 2 and err.count("\n") == 1 and "budget of 0" in err, (code, out, err)
        assert fake.config_maps == {}
        code, out, err = await run("start", "--revision", "new")
        assert code == 2 and "--upgrade-budget" in err
        code, out, err = await run("status")
        assert code == 0 and "no upgrade started" in out
        # the releases the skew guard would check: slurmctld's, and each slurmd's (no agent here)
        ctld = Version.parse(cluster.release.version)
        assert out.count("(node record)") == 2 and f"slurmctld {ctld}" in out, out
        code, out, err = await run("start", "--revision", "new", "--upgrade-budget", "1")
        assert code == 0, err
        await cluster.wait_node("n1", lambda n: n.state.drain and n.state.busy, timeout=60)  # its turn first
        code, out, err = await run("pause")
        assert code == 0 and "paused" in out, err
        await cluster.scancel(first)  # paused, the worker out of service still finishes its turn
        await eventually(
            lambda: asyncio.sleep(0.1, list(replaced)), lambda r: r == ["n1"], what="n1 replaced"
        )
        await cluster.wait_node("n1", lambda n: not n.state.drain, timeout=60)
        seen = cp.sample("slurm_sidecars_fleet_refreshes_total", result="ok")
        await eventually(
            lambda: asyncio.sleep(0.1, cp.sample("slurm_sidecars_fleet_refreshes_total", result="ok")),
            lambda n: n >= seen + 10,
            what="ten cycles while paused",
        )
        node = await client.node("n2")
        assert node is not None and not node.state.drain and replaced == ["n1"]  # paused: not its turn
        code, out, err = await run("status")
        assert code == 0 and "paused, 1/2 upgraded" in out, out
        code, out, err = await run("resume")
        assert code == 0 and "resumed" in out
        await cluster.wait_node("n2", lambda n: n.state.drain and n.state.busy, timeout=60)
        await cluster.scancel(second)
        await eventually(
            lambda: cp.get("/v1/upgrade"), lambda r: r[1]["upgrade"]["complete"], within=60, what="complete"
        )
        code, out, err = await run("status")
        assert code == 0 and "complete, 2/2 upgraded" in out, out
