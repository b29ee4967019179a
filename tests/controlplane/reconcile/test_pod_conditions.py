"""Worker pods carry SlurmNodeReady/Drained/Down conditions, written through the status
subresource only when they change and once a state has settled: a flapping node writes nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sidecars.controlplane.reconcile.pod_conditions import ConditionWriter
from sidecars.controlplane.settings import ConditionSettings
from sidecars.devcluster import DevCluster
from sidecars.kube import KubeClient
from sidecars.kube.client import KubeRetry
from tests.controlplane.conftest import control_plane, one_pass, writer_deps
from tests.controlplane.reconcile import settle
from tests.fakekube import FakeKube, configuration
from tests.helpers import eventually, fleet_node, fleet_snapshot

pytestmark = pytest.mark.cluster(nodes=3)


def conds(fake: FakeKube, pod: str) -> dict[str, tuple[str, str]]:
    got = fake.pods[("slurm", pod)]["status"]["conditions"]
    return {c["type"]: (c["status"], c.get("message", "")) for c in got}


async def read(fake: FakeKube, pod: str) -> dict[str, tuple[str, str]]:
    return conds(fake, pod)


def patches(fake: FakeKube, pod: str) -> int:
    return len(fake.answered("PATCH", f"/pods/{pod}/status", 200))


async def settled(cp: Any, seconds: float) -> None:
    """Refreshes (each followed by a pass) for longer than `seconds`: what was due is written."""
    start, first = time.monotonic(), cp.sample("slurm_sidecars_fleet_refreshes_total", result="ok")

    async def passes() -> tuple[float, float]:
        return time.monotonic() - start, cp.sample("slurm_sidecars_fleet_refreshes_total", result="ok")

    await eventually(passes, lambda p: p[0] > seconds and p[1] >= first + 3, what="passes", within=60)
    await settle.settled(cp)  # and the writers' rounds, which a loaded machine can run behind the refreshes


@pytest.mark.releases("slurm26")  # node states are read per release in test_fleet_view.py
async def test_conditions_follow_slurm_only_on_change_and_never_flap(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    for i in (1, 2, 3):
        fake.add_pod(f"w{i}", hostname=f"n{i}")
    client = cluster.client()
    settle = 3.0
    async with control_plane(cluster, url, conditions={"settle_seconds": settle}) as cp:
        for pod in ("w1", "w2", "w3"):
            got = await eventually(lambda p=pod: read(fake, p), lambda c: "SlurmNodeReady" in c, what=pod)
            assert got == {
                "Ready": ("True", ""),  # the kubelet's condition is kept: conditions merge by type
                "SlurmNodeReady": ("True", ""),
                "SlurmNodeDrained": ("False", ""),
                "SlurmNodeDown": ("False", ""),
            }
        assert [patches(fake, p) for p in ("w1", "w2", "w3")] == [1, 1, 1]

        # an admin's drain shows on w2 with Slurm's reason; a job starting on n1 writes nothing
        await client.drain(["n2"], "admin: bad DIMM")
        job = await cluster.sbatch("-w", "n1", wrap="sleep 300")
        await cluster.wait_job(job, "RUNNING")
        got = await eventually(
            lambda: read(fake, "w2"), lambda c: c["SlurmNodeDrained"][0] == "True", what="w2 drained"
        )
        assert got["SlurmNodeDrained"] == ("True", "admin: bad DIMM")
        assert got["SlurmNodeReady"][0] == "False" and got["SlurmNodeDown"] == ("False", "")
        status = fake.pods[("slurm", "w2")]["status"]["conditions"]
        assert all(c.get("lastTransitionTime") for c in status if c["type"] == "SlurmNodeReady")

        # n3 flaps drained/undrained, each state seen by the control plane, faster than `settle`
        plane = cp.plane

        async def seen(drained: bool) -> bool:
            view = plane.fleet.snapshot.nodes.get("n3")
            return view is not None and view.drain == drained

        longest, last = 0.0, time.monotonic()
        for _ in range(4):
            for drained in (True, False):
                await (client.drain(["n3"], "admin: flaky link") if drained else client.undrain(["n3"]))
                await eventually(lambda d=drained: seen(d), bool, what="n3's state in the view")
                longest, last = max(longest, time.monotonic() - last), time.monotonic()
        await cluster.scancel(job)
        await settled(cp, settle + 0.5)
        if longest < settle:  # every state held shorter than `settle`: none may be written
            assert patches(fake, "w3") == 1
        assert conds(fake, "w3")["SlurmNodeReady"] == ("True", "")
        assert patches(fake, "w1") == 1  # the job came and went: no condition changed
        assert patches(fake, "w2") == 2


async def test_writes_are_rate_limited_and_the_rest_wait_for_the_next_pass(
    fake_kube: tuple[FakeKube, str],
) -> None:
    fake, url = fake_kube
    now = [100.0]
    views = {}
    for i in range(1, 6):
        fake.add_pod(f"w{i}", hostname=f"n{i}")
        views[f"n{i}"] = fleet_node(f"n{i}")
    snap = fleet_snapshot(views.values())
    async with KubeClient(configuration(url), retry=KubeRetry(attempts=2, initial_wait=0.01)) as kube:
        pods, _ = await kube.list_pods("slurm", "app=slurmd")
        conditions = ConditionSettings(qps=2, settle_seconds=0)
        writer = ConditionWriter(writer_deps(kube=kube, clock=lambda: now[0]), conditions)
        assert await one_pass(writer, pods, snap) == 2  # a burst of at most `qps`
        assert await one_pass(writer, pods, snap) == 0  # no time has passed: no token
        now[0] += 1.0
        assert await one_pass(writer, pods, snap) == 2
        now[0] += 10.0
        assert await one_pass(writer, pods, snap) == 1
        pods, _ = await kube.list_pods("slurm", "app=slurmd")
        assert await one_pass(writer, pods, snap) == 0  # all written: nothing more, however long
    assert sum(patches(fake, f"w{i}") for i in range(1, 6)) == 5
