"""Recycling unregistered workers: capped per window, backed off per pod, suspended on systemic faults."""

from __future__ import annotations

import asyncio

import pytest

from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import Running, control_plane
from tests.fakekube import FakeKube
from tests.helpers import eventually

pytestmark = pytest.mark.cluster(nodes=3)


def _deleted(fake: FakeKube) -> list[str]:
    return [r.path.rsplit("/", 1)[1] for r in fake.answered("DELETE", "/pods/", 200)]


async def _cycles(cp: Running, n: int = 3, within: float = 60) -> None:
    """Let `n` more passes of the recycler run, each begun after now (the writers run in their own
    loop: on a loaded machine refreshes alone can go by before a pass has judged anything)."""
    start = _passes(cp)
    await eventually(
        lambda: asyncio.sleep(0.05, _passes(cp)),
        lambda v: v >= start + n + 1,
        within=within,
        what=f"{n} recycler passes",
    )


def _passes(cp: Running) -> float:
    return sum(
        cp.sample("slurm_sidecars_reconcile_passes_total", writer="recycle", result=r)
        for r in ("ok", "skipped", "error")
    )


async def test_recycling_is_capped_per_window_with_warning_events(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_workers(3)
    fake.add_pod("ghost-a", hostname="n8")  # Ready, but Slurm has no n8 / n9
    fake.add_pod("ghost-b", hostname="n9")
    async with control_plane(
        cluster, kube_url=url, recycle={"grace_seconds": 0.5, "window_seconds": 8.0, "fraction": 0.1}
    ) as cp:  # a window a loaded machine's passes fit in: ghost-b is seen capped before it ends
        # an agent reports worker-2 unregistered: a candidate at once (no grace: the agent tried to heal)
        status, _ = await cp.post(
            "/v1/nodes/n2/report",
            {
                "pod_namespace": "slurm",
                "pod_name": "worker-2",
                "registered": False,
                "detail": "slurmd not registered",
            },
        )
        assert status == 204
        # 3 of 5 workers look unregistered: more than half, so recycling holds back entirely
        await _cycles(cp)
        assert _deleted(fake) == []
        assert cp.plane.k8s is not None and (cp.plane.k8s.recycler.suspended or "").startswith("systemic")
        assert (
            any(e["reason"] == "WorkersUnregistered" for e in fake.events) is False
        )  # no pod name: log only
        # the agent recovers: 2 of 5 look unregistered -> recycling resumes, capped at max(1, 10%) = 1
        await cp.post(
            "/v1/nodes/n2/report",
            {"pod_namespace": "slurm", "pod_name": "worker-2", "registered": True, "detail": ""},
        )
        first = await eventually(
            lambda: asyncio.sleep(0.05, _deleted(fake)), lambda d: len(d) == 1, what="first recycle"
        )
        assert first == ["ghost-a"]
        # the sign that the recycler judged ghost-b after ghost-a went: it counts it capped
        await cp.counted("slurm_sidecars_recycles_total", what="ghost-b capped", result="capped")
        assert _deleted(fake) == ["ghost-a"]  # the cap holds ghost-b back within the window
        warnings = [e for e in fake.events if e["reason"] == "WorkerRecycled"]
        assert [(e["type"], e["involvedObject"]["name"]) for e in warnings] == [("Warning", "ghost-a")]
        assert "absent from Slurm" in warnings[0]["message"]
        # the window passes: the next one goes
        await eventually(
            lambda: asyncio.sleep(0.1, _deleted(fake)),
            lambda d: len(d) == 2,
            within=30,
            what="second recycle after the window",
        )
        assert _deleted(fake) == ["ghost-a", "ghost-b"]
        # the same pod name comes back (a StatefulSet recreates it) still absent: backoff holds it
        fake.add_pod("ghost-a", hostname="n8")
        held = cp.sample("slurm_sidecars_recycles_total", result="backoff") or 0
        # the recycler judges it (past its grace and a window) and only the per-pod backoff holds it
        await eventually(
            lambda: asyncio.sleep(0.1, cp.sample("slurm_sidecars_recycles_total", result="backoff") or 0),
            lambda n: n > held,
            within=15,
            what="the per-pod backoff holding the returned pod",
        )
        assert _deleted(fake) == ["ghost-a", "ghost-b"]


async def test_recycling_suspended_while_slurmctld_is_unreachable(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_workers(3)
    async with control_plane(cluster, kube_url=url, pod_name="cp-0") as cp:
        await _cycles(cp, 2)
        await cluster.stop_slurmctld()
        await eventually(
            lambda: cp.get("/status"),
            lambda r: r[1]["slurm_reachable"] is False,
            within=20,
            what="slurmctld seen unreachable",
        )
        await cp.post(
            "/v1/nodes/n1/report",
            {
                "pod_namespace": "slurm",
                "pod_name": "worker-1",
                "registered": False,
                "detail": "cannot reach slurmctld",
            },
        )
        fake.add_pod("ghost", hostname="n7")
        pods = cp.plane.workers.pods
        await eventually(lambda: pods is not None and "ghost" in pods.pods, what="the ghost's pod listed")
        await _cycles(cp, 1)
        assert _deleted(fake) == []
        assert cp.plane.k8s is not None and cp.plane.k8s.recycler.suspended == "slurmctld unreachable"
        assert cp.sample("slurm_sidecars_recycling_suspended", reason="slurmctld_unreachable") == 1
        # the view keeps serving the last known state meanwhile
        status, nodes = await cp.get("/v1/nodes")
        assert status == 200 and len(nodes) == 3


async def test_systemic_fault_is_reported_once_as_a_warning_event(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_pod("worker-1", hostname="n1")
    for i in range(3):
        fake.add_pod(f"ghost-{i}", hostname=f"x{i}")
    async with control_plane(cluster, kube_url=url, pod_name="cp-0") as cp:
        await eventually(
            lambda: asyncio.sleep(0.05, [e for e in fake.events if e["reason"] == "WorkersUnregistered"]),
            lambda es: len(es) == 1,
            what="systemic warning",
        )
        await _cycles(cp, 4)
        events = [e for e in fake.events if e["reason"] == "WorkersUnregistered"]
        assert len(events) == 1 and events[0]["type"] == "Warning"
        assert events[0]["involvedObject"]["name"] == "cp-0" and "3 of 4" in events[0]["message"]
        assert _deleted(fake) == []
