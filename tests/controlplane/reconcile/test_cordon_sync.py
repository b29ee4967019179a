"""A cordoned Kubernetes Node drains the Slurm nodes of the workers on it; uncordon undrains; an
admin's drain is never undone, and ours removed while the cordon holds is applied again."""

from __future__ import annotations

from typing import Any

import pytest

from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import control_plane
from tests.controlplane.reconcile.settle import drains, settled
from tests.fakekube import FakeKube
from tests.helpers import eventually

# the rules are ours; the drain batcher's writes are tested per release in test_drains.py
pytestmark = [pytest.mark.cluster(nodes=4), pytest.mark.releases("slurm26")]
K1 = "slurm-sidecars: kubernetes node k1 cordoned"
K2 = "slurm-sidecars: kubernetes node k2 cordoned"


def two_hosts(fake: FakeKube) -> None:
    """Workers w1, w2 (Slurm n1, n2) on Kubernetes node k1; w3, w4 (n3, n4) on k2."""
    fake.add_node("k1")
    fake.add_node("k2")
    for i in range(1, 5):
        fake.add_pod(f"w{i}", hostname=f"n{i}", node_name="k1" if i <= 2 else "k2")


async def test_cordon_drains_its_workers_and_uncordon_undrains_only_ours(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    two_hosts(fake)
    client = cluster.client()
    await client.drain(["n3"], "admin: bad DIMM")  # someone else's drain, on a node to be cordoned
    async with control_plane(cluster, url) as cp:
        await eventually(lambda: cp.leading("cordons"), what="leader with pods and nodes")
        fake.set_node_spec("k1", unschedulable=True)
        nodes = await cluster.wait_nodes(lambda ns: {"n1", "n2"} <= drains(ns).keys(), what="n1, n2 drained")
        assert drains(nodes) == {"n1": K1, "n2": K1, "n3": "admin: bad DIMM"}

        fake.set_node_spec("k2", unschedulable=True)
        nodes = await cluster.wait_nodes(lambda ns: "n4" in drains(ns), what="n4 drained")
        assert drains(nodes) == {"n1": K1, "n2": K1, "n3": "admin: bad DIMM", "n4": K2}

        # uncordon both: ours are undone, the admin's stays though its node was cordoned too
        fake.set_node_spec("k1", unschedulable=False)
        fake.set_node_spec("k2", unschedulable=False)
        nodes = await cluster.wait_nodes(
            lambda ns: not {"n1", "n2", "n4"} & drains(ns).keys(), what="n1, n2, n4 undrained"
        )
        await settled(cp)
        assert drains(await client.nodes()) == {"n3": "admin: bad DIMM"}
        assert not [e for e in fake.events if e["reason"] == "SlurmDrainReapplied"]  # nothing re-applied

        # O(changes): the Nodes were listed once, then watched by one watch (still open)
        node_calls = {k: n for k, n in fake.calls().items() if k[1] == "nodes"}
        assert node_calls == {("list", "nodes"): 1, ("watch", "nodes"): 1}


async def test_a_drain_removed_while_cordoned_is_applied_again_with_an_event(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    two_hosts(fake)
    client = cluster.client()
    async with control_plane(cluster, url) as cp:
        await eventually(lambda: cp.leading("cordons"), what="leader with pods and nodes")
        fake.set_node_spec("k1", unschedulable=True)
        await cluster.wait_nodes(lambda ns: {"n1", "n2"} <= drains(ns).keys(), what="n1, n2 drained")
        await eventually(lambda: _held(cp), lambda h: h == {"n1": "k1", "n2": "k1"}, what="drains seen")

        await client.undrain(["n1"])  # an admin lifts our drain while k1 is still cordoned
        node = await cluster.wait_node("n1", lambda n: n.state.drain and n.reason is not None)
        assert node.reason is not None and node.reason.text == K1
        events = await eventually(
            lambda: _events(fake, "SlurmDrainReapplied"), lambda es: len(es) >= 1, what="the Event"
        )
        (event,) = events
        assert event["type"] == "Warning"
        assert event["involvedObject"]["kind"] == "Pod" and event["involvedObject"]["name"] == "w1"
        assert event["involvedObject"]["uid"] == fake.pods[("slurm", "w1")]["metadata"]["uid"]
        assert "n1" in event["message"] and "k1" in event["message"]

        # the admin now drains n2 for a reason of their own: uncordon must not undo it
        await client.drain(["n2"], "admin: reseat GPU")
        await cluster.wait_node("n2", lambda n: n.reason is not None and n.reason.text == "admin: reseat GPU")
        fake.set_node_spec("k1", unschedulable=False)
        await cluster.wait_node("n1", lambda n: not n.state.drain, what="n1 undrained")
        await settled(cp)
        assert drains(await client.nodes()) == {"n2": "admin: reseat GPU"}
        assert len(await _events(fake, "SlurmDrainReapplied")) == 1  # one re-apply, one Event


async def test_a_re_drain_queued_before_the_admins_undrain_still_gets_its_event(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    # the order CI hit, forced: a drain of n1 was queued (by a pass on a snapshot older than its
    # first drain) and is still in the batcher when the admin lifts ours; the passes that see n1
    # undrained find it queued and ask nothing, and the batcher's write is the re-apply. The batcher
    # holds what is asked (a window no test outlives) until this test flushes it.
    fake, url = fake_kube
    two_hosts(fake)
    client = cluster.client()
    async with control_plane(cluster, url, batch_window_seconds=3600.0) as cp:
        drains_ = cp.plane.drains
        await eventually(lambda: cp.leading("cordons"), what="leader with pods and nodes")
        fake.set_node_spec("k1", unschedulable=True)
        await eventually(lambda: _pending(cp), lambda p: {"n1", "n2"} <= p.keys(), what="drains asked")
        await _flush(cp)
        await eventually(lambda: _held(cp), lambda h: h == {"n1": "k1", "n2": "k1"}, what="drains seen")

        drains_.submit("n1", "drain", K1)  # the stale pass's ask, still queued...
        await client.undrain(["n1"])  # ...when an admin lifts our drain while k1 is still cordoned
        await _passes_after(cp)  # passes saw n1 undrained, with its drain queued
        assert not [e for e in fake.events if e["reason"] == "SlurmDrainReapplied"]
        await _flush(cp)
        node = await cluster.wait_node("n1", lambda n: n.state.drain and n.reason is not None)
        assert node.reason is not None and node.reason.text == K1
        events = await eventually(
            lambda: _events(fake, "SlurmDrainReapplied"), lambda es: len(es) >= 1, what="the Event"
        )
        assert [e["involvedObject"]["name"] for e in events] == ["w1"]
        await _passes_after(cp)
        assert len(await _events(fake, "SlurmDrainReapplied")) == 1  # one re-apply, one Event


async def _pending(cp: Any) -> dict[str, Any]:
    return dict(cp.plane.drains.pending)


async def _flush(cp: Any) -> None:
    """Write what the batcher holds, as its loop does at the end of a window."""
    batch, cp.plane.drains.pending = cp.plane.drains.pending, {}
    await cp.plane.drains.flush(batch)


async def _passes_after(cp: Any) -> None:
    """Two refreshes begun after now, and two ends of the writers' round after those."""
    await settled(cp, refreshes=2, pending_ok=True)


async def _held(cp: Any) -> dict[str, str]:
    return dict(cp.plane.writers["cordons"].held)


async def _events(fake: FakeKube, reason: str) -> list[dict[str, Any]]:
    return [e for e in fake.events if e["reason"] == reason]


@pytest.mark.releases("slurm22")  # the rule is ours, not Slurm's: one release shows it
async def test_a_configured_taint_counts_as_a_cordon_but_prefer_no_schedule_does_not(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    two_hosts(fake)
    client = cluster.client()
    key = "example.com/gpu-health"
    async with control_plane(cluster, url, cordons={"taints": (key,)}) as cp:
        await eventually(lambda: cp.leading("cordons"), what="leader with pods and nodes")
        # k2's soft taint first, then k1's hard one: once k1's workers are drained, k2's was seen too
        fake.set_node_spec("k2", taints=[{"key": key, "value": "degraded", "effect": "PreferNoSchedule"}])
        fake.set_node_spec("k1", taints=[{"key": key, "value": "failed", "effect": "NoExecute"}])
        await cluster.wait_nodes(lambda ns: {"n1", "n2"} <= drains(ns).keys(), what="n1, n2 drained")
        await settled(cp)
        assert drains(await client.nodes()) == {"n1": K1, "n2": K1}
        fake.set_node_spec("k1", taints=[{"key": "other.example/thing", "effect": "NoSchedule"}])
        await cluster.wait_nodes(lambda ns: not drains(ns), what="undrained when the taint is gone")


@pytest.mark.releases("slurm22")
async def test_cordon_sync_off_drains_nothing_and_adds_no_node_reads(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    """Maintenance windows read Node annotations whenever Kubernetes is on (no flag turns them
    off), so Nodes are still listed with cordon sync off: what off must show is that a cordon
    drains nothing and that cordon sync adds no Node traffic of its own: the shared cache's one
    list (its watch still open, so not yet recorded) is all there is."""
    fake, url = fake_kube
    two_hosts(fake)
    fake.set_node_spec("k1", unschedulable=True)
    async with control_plane(cluster, url, cordons={"sync": False}) as cp:
        await eventually(cp.leading, what="leader with pods")
        assert "cordons" not in cp.plane.writers
        nodes = cp.plane.workers.nodes
        assert nodes is not None
        await eventually(lambda: _synced(nodes), bool, what="the shared Node cache listed")
        assert nodes.nodes["k1"].unschedulable  # the cordon was seen, and is ignored
        await settled(cp)
        assert drains(await cluster.client().nodes()) == {}
        node_calls = {k: n for k, n in fake.calls().items() if k[1] == "nodes"}
        assert node_calls == {("list", "nodes"): 1, ("watch", "nodes"): 1}  # one list, one watch open


async def _synced(nodes: Any) -> bool:
    return bool(nodes.synced.is_set())
