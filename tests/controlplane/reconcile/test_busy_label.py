"""Worker pods running jobs carry slurm-sidecars.io/busy=true (a PDB with maxUnavailable 0 selects
it); it is written only on change, and removed only after the node has stayed idle a while."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sidecars.controlplane.fleet.snapshot import FleetSnapshot
from sidecars.controlplane.reconcile.busy_label import LABEL, BusyLabeler
from sidecars.controlplane.settings import BusySettings
from sidecars.devcluster import DevCluster
from sidecars.kube import KubeClient
from sidecars.kube.client import KubeRetry
from tests.controlplane.conftest import control_plane, one_pass, writer_deps
from tests.controlplane.reconcile.settle import settled
from tests.fakekube import FakeKube, configuration
from tests.helpers import eventually, fleet_node, fleet_snapshot


def label_patches(fake: FakeKube, pod: str) -> list[str | None]:
    """The busy values our label patches of `pod` wrote, in order (None: removed)."""
    return [
        r.body["metadata"]["labels"][LABEL]
        for r in fake.answered("PATCH", f"/pods/{pod}", 200)
        if r.path.endswith(f"/pods/{pod}")
        and LABEL in ((r.body or {}).get("metadata", {}).get("labels") or {})
    ]


async def busy_label(fake: FakeKube, pod: str) -> str | None:
    return (fake.pods[("slurm", pod)]["metadata"].get("labels") or {}).get(LABEL)


@pytest.mark.releases("slurm22")  # the rule is ours: any release's job states show it
@pytest.mark.cluster(nodes=2)
async def test_a_job_labels_its_pod_busy_until_the_node_stays_idle(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_pod("w1", hostname="n1")
    fake.add_pod("w2", hostname="n2")
    release = 15.0  # far longer than a job takes to follow another here, on a loaded machine too
    async with control_plane(cluster, url, busy={"release_seconds": release}) as cp:
        await eventually(cp.leading, what="leader with pods")
        first = await cluster.sbatch("-w", "n1", wrap="sleep 300")
        await cluster.wait_job(first, "RUNNING")
        await eventually(lambda: busy_label(fake, "w1"), lambda v: v == "true", what="w1 labelled busy")
        labels = fake.pods[("slurm", "w1")]["metadata"]["labels"]
        assert labels == {"app": "slurmd", LABEL: "true"}  # the pod's own labels are kept

        # one job ends and the next starts on the same node: the label stays, nothing is written
        await cluster.scancel(first)
        gap_started = time.monotonic()
        second = await cluster.sbatch("-w", "n1", wrap="sleep 300")
        await cluster.wait_job(second, "RUNNING")
        gap = time.monotonic() - gap_started
        await settled(cp)  # the labeller's own passes, not only refreshes a slow round can lag
        # the node was never idle as long as `release`, so the label never moved
        assert gap < release, f"the next job took {gap:.1f}s to start: too slow to show the rule"
        assert label_patches(fake, "w1") == ["true"]
        assert await busy_label(fake, "w1") == "true"

        # the last job ends: after `release` idle seconds, the label goes (once), w2 never had it
        await cluster.scancel(second)
        ended = time.monotonic()
        await eventually(
            lambda: busy_label(fake, "w1"), lambda v: v is None, what="w1's label removed", within=60
        )
        assert time.monotonic() - ended >= release - 1.0  # not at the first idle pass
        assert label_patches(fake, "w1")[-1] is None
        assert label_patches(fake, "w1").count(None) == 1
        assert label_patches(fake, "w2") == [] and await busy_label(fake, "w2") is None


@pytest.mark.releases("slurm22")
@pytest.mark.cluster(nodes=2)
async def test_busy_label_off_writes_no_label(cluster: DevCluster, fake_kube: tuple[FakeKube, str]) -> None:
    fake, url = fake_kube
    fake.add_pod("w1", hostname="n1")
    async with control_plane(cluster, url, busy={"label": False}) as cp:
        assert "busy_label" not in cp.plane.writers
        await eventually(cp.leading, what="leader with pods")
        job = await cluster.sbatch("-w", "n1", wrap="sleep 300")
        await cluster.wait_job(job, "RUNNING")
        await eventually(
            lambda: _view_busy(cp, "n1"), bool, what="the control plane saw n1 busy"
        )  # and then a pass or more
        await settled(cp)
        assert label_patches(fake, "w1") == []
        await cluster.scancel(job)


async def _view_busy(cp: Any, node: str) -> bool:
    view = cp.plane.fleet.snapshot.nodes.get(node)
    return view is not None and view.busy


# ---------------------------------------------------------------------------- rules, no Slurm
def _snap(busy: dict[str, bool]) -> FleetSnapshot:
    return fleet_snapshot(fleet_node(n, busy=b) for n, b in busy.items())


async def test_flapping_rate_limit_and_order_without_slurm(fake_kube: tuple[FakeKube, str]) -> None:
    fake, url = fake_kube
    now = [100.0]
    for i in range(1, 5):
        fake.add_pod(f"w{i}", hostname=f"n{i}")
    fake.pods[("slurm", "w4")]["metadata"]["labels"][LABEL] = "true"  # labelled before a restart
    async with KubeClient(configuration(url), retry=KubeRetry(attempts=2, initial_wait=0.01)) as kube:

        async def pods() -> list[Any]:
            return (await kube.list_pods("slurm", "app=slurmd"))[0]

        busy = BusySettings(label_qps=2, release_seconds=5.0)
        labeler = BusyLabeler(writer_deps(kube=kube, clock=lambda: now[0]), busy, burst_seconds=1.0)
        # n1..n3 busy, n4 idle (labelled): sets first, two a second; the removal waits `release`
        assert (
            await one_pass(labeler, await pods(), _snap({"n1": True, "n2": True, "n3": True, "n4": False}))
            == 2
        )
        assert [await busy_label(fake, f"w{i}") for i in range(1, 5)] == ["true", "true", None, "true"]
        now[0] += 1.0
        stale = await pods()
        assert await one_pass(labeler, stale, _snap({"n1": True, "n2": True, "n3": True, "n4": False})) == 1
        # the same stale pod list again (the watch has not caught up): nothing is written twice
        now[0] += 10.0
        assert await one_pass(labeler, stale, _snap({"n1": True, "n2": True, "n3": True, "n4": False})) == 1
        assert await busy_label(fake, "w4") is None  # idle since t=100, removed once `release` passed
        assert [len(label_patches(fake, f"w{i}")) for i in range(1, 5)] == [1, 1, 1, 1]

        # n1 flaps idle/busy faster than `release`: its label never moves
        for busy in (False, True) * 4:
            now[0] += 2.0
            await one_pass(labeler, await pods(), _snap({"n1": busy, "n2": True, "n3": True, "n4": False}))
        assert label_patches(fake, "w1") == ["true"]

        # someone removes the label while the job runs: it is put back at the next pass
        fake.pods[("slurm", "w2")]["metadata"]["labels"].pop(LABEL)
        fake.pods[("slurm", "w2")]["metadata"]["resourceVersion"] = "99999"
        now[0] += 2.0
        assert (
            await one_pass(labeler, await pods(), _snap({"n1": True, "n2": True, "n3": True, "n4": False}))
            == 1
        )
        assert label_patches(fake, "w2") == ["true", "true"]

        # a pod whose node left Slurm is idle too: unlabelled after `release`
        now[0] += 1.0
        assert await one_pass(labeler, await pods(), _snap({"n2": True, "n3": True})) == 0
        now[0] += 5.0
        assert await one_pass(labeler, await pods(), _snap({"n2": True, "n3": True})) == 1
        assert await busy_label(fake, "w1") is None
    assert labeler.writes == 6


async def test_a_pass_may_use_a_burst_of_several_seconds(fake_kube: tuple[FakeKube, str]) -> None:
    """Passes come every --interval-seconds: a bucket of one second's tokens would cap the rate at
    qps / interval, so the first pass after start labels `qps x burst` busy pods, not `qps`."""
    fake, url = fake_kube
    for i in range(1, 13):
        fake.add_pod(f"w{i}", hostname=f"n{i}")
    async with KubeClient(configuration(url), retry=KubeRetry(attempts=2, initial_wait=0.01)) as kube:
        pods, _ = await kube.list_pods("slurm", "app=slurmd")
        labeler = BusyLabeler(
            writer_deps(kube=kube, clock=lambda: 0.0), BusySettings(label_qps=2), burst_seconds=5.0
        )
        assert await one_pass(labeler, pods, _snap({f"n{i}": True for i in range(1, 13)})) == 10
