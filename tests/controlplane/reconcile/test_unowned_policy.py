"""The opt-in policy for drains nobody owns, on real Slurm: a worker Slurm drained itself (its prolog
failed) and healthy again is resumed, with an Event; a worker whose slurmd stopped (DOWN, "Not
responding") has its pod recycled; an admin's drain is never touched. Off (the default), each is only
reported (tests/controlplane/fleet/test_unowned_drains.py)."""

from __future__ import annotations

import pytest

from sidecars.controlplane.reconcile.unowned_policy import RESUMED
from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import control_plane
from tests.fakekube import FakeKube
from tests.helpers import eventually

pytestmark = pytest.mark.cluster(nodes=3, extra_conf="Prolog=/bin/false\n", slurmd_timeout=5)


def _deleted(fake: FakeKube) -> list[str]:
    return [r.path.rsplit("/", 1)[1] for r in fake.answered("DELETE", "/pods/", 200)]


@pytest.mark.timeout(240)
@pytest.mark.releases("slurm26")  # our rule over Slurm: its drains' words per release are in the other test
async def test_slurms_own_drains_are_resumed_when_healthy_and_recycled_when_not(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_workers(3)
    client = cluster.client()
    async with control_plane(
        cluster,
        kube_url=url,
        unowned={"drain_policy": True, "settle_seconds": 1.0},
        recycle={"fraction": 1.0},
    ) as cp:
        await client.drain(["n2"], "bad fan, ticket 12")  # an admin's: never touched
        job = await cluster.sbatch("-w", "n1", wrap="true")  # its prolog fails: Slurm drains n1
        await cluster.kill_slurmd("n3")  # DOWN, "Not responding", after SlurmdTimeout: not healthy

        # n1: healthy (its pod Ready, its slurmd answering, its job requeued): given back
        event = await eventually(
            lambda: [e for e in fake.events if e["reason"] == RESUMED],
            within=60,
            what="the resume's Event",
        )
        await cluster.wait_node("n1", lambda n: not n.state.drain)
        assert event[0]["involvedObject"]["name"] == "worker-1"
        assert "'Prolog error" in event[0]["message"] and "(prolog)" in event[0]["message"], event
        # n3: its slurmd gone, so its pod is handed to the recycler, which deletes it
        await eventually(
            lambda: _deleted(fake), lambda d: "worker-3" in d, within=90, what="worker-3 recycled"
        )
        recycled = [e for e in fake.events if e["reason"] == "WorkerRecycled"]
        assert any("'Not responding' (not_responding)" in e["message"] for e in recycled), recycled
        # the admin's drain stays, and no other node was touched
        n2 = await client.node("n2")
        assert n2 is not None and n2.state.drain and n2.reason is not None
        assert n2.reason.text == "bad fan, ticket 12"
        assert _deleted(fake) == ["worker-3"]
        assert cp.plane.leader.is_leader
        await cluster.scancel(job)
