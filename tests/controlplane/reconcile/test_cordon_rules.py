"""Cordon sync's decisions on their own, against scripted snapshots: the orders in which Slurm, the
snapshot and the drain batcher can report a re-drain (the rules on real Slurm are in
test_cordon_sync.py)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from sidecars.controlplane.fleet.drains import DrainRequest, Written
from sidecars.controlplane.fleet.snapshot import FleetNode, FleetSnapshot
from sidecars.controlplane.reconcile import View
from sidecars.controlplane.reconcile.cordons import CordonSync, cordon_reason
from sidecars.kube import KubeNode
from tests.controlplane.conftest import writer_deps
from tests.controlplane.reconcile.standins import Drains, Nodes
from tests.helpers import fleet_node, fleet_pod, fleet_snapshot

OURS = cordon_reason("k1")


class Kube:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    async def create_event(
        self, namespace: str, involved: dict[str, str], reason: str, message: str, **_: Any
    ) -> None:
        self.events.append((involved["name"], reason))


K1 = KubeNode(name="k1", annotations={}, unschedulable=True, taints=(), resource_version="1")


def snapshot(*nodes: FleetNode) -> FleetSnapshot:
    return fleet_snapshot(nodes)


def wrote(name: str, read_at: float | None = None) -> Written:
    """The batcher's word: our cordon drain written on `name`, on a read begun at `read_at` (now)."""
    return Written({name: DrainRequest("drain", OURS)}, time.monotonic() if read_at is None else read_at)


def sync(nodes: Nodes | None = None) -> tuple[CordonSync, Kube, Drains]:
    kube, drains = Kube(), Drains()
    cs = CordonSync(writer_deps(kube=kube, nodes=nodes or Nodes(K1), drains=drains))
    return cs, kube, drains


PODS = [fleet_pod("w1", hostname="n1", node_name="k1")]
DRAINED = snapshot(fleet_node("n1", drained=True, reason=OURS))
LIFTED = snapshot(fleet_node("n1"))  # an admin ran `scontrol update state=resume`
MARKED = (("SlurmNodeDrained", "True", OURS),)  # what the condition writer puts on a drained pod


async def test_a_re_drain_seen_before_the_batcher_reports_it_still_gets_its_event() -> None:
    cs, kube, drains = sync()
    await cs.reconcile(View(PODS, DRAINED))
    await cs.reconcile(View(PODS, LIFTED))
    assert drains.asked == [("n1", "drain", OURS)]
    await cs.reconcile(View(PODS, DRAINED))  # the write landed: the snapshot sees it first
    cs.written(wrote("n1"))  # then the batcher's scontrol returns
    await cs.reconcile(View(PODS, DRAINED))
    await cs.reconcile(View(PODS, DRAINED))
    assert kube.events == [("w1", "SlurmDrainReapplied")]


async def test_a_re_drain_reported_by_the_batcher_first_gets_one_event() -> None:
    cs, kube, _ = sync()
    await cs.reconcile(View(PODS, DRAINED))
    await cs.reconcile(View(PODS, LIFTED))
    cs.written(wrote("n1"))
    await cs.reconcile(View(PODS, DRAINED))
    await cs.reconcile(View(PODS, DRAINED))
    assert kube.events == [("w1", "SlurmDrainReapplied")]


async def test_someone_elses_drain_in_between_is_no_re_drain() -> None:
    cs, kube, _ = sync()
    await cs.reconcile(View(PODS, DRAINED))
    await cs.reconcile(View(PODS, LIFTED))
    await cs.reconcile(View(PODS, snapshot(fleet_node("n1", drained=True, reason="admin: bad dimm"))))
    cs.written(wrote("n1"))
    await cs.reconcile(View(PODS, snapshot(fleet_node("n1", drained=True, reason="admin: bad dimm"))))
    assert kube.events == []


async def test_a_new_leader_knows_a_lifted_drain_was_ours_from_the_pods_condition() -> None:
    # the last leader drained n1 and its condition writer said so on the pod; an admin lifted the
    # drain while no leader ran: the new leader's first look re-drains it with the Event
    marked = [fleet_pod("w1", hostname="n1", node_name="k1", conditions=MARKED)]
    cs, kube, drains = sync()
    await cs.reconcile(View(marked, LIFTED))
    cs.written(wrote("n1"))
    await cs.reconcile(View(marked, DRAINED))
    assert drains.asked == [("n1", "drain", OURS)]
    assert kube.events == [("w1", "SlurmDrainReapplied")]


async def test_a_first_cordon_or_a_stale_condition_is_no_re_drain() -> None:
    cs, kube, _ = sync()
    await cs.reconcile(View(PODS, LIFTED))  # never drained: a first drain, no Event
    cs.written(wrote("n1"))
    await cs.reconcile(View(PODS, DRAINED))
    # a condition the writer has not caught up with yet: once this leader has looked at n1, only
    # what it saw itself counts (here: uncordoned, undrained, cordoned again)
    stale = [fleet_pod("w1", hostname="n1", node_name="k1", conditions=MARKED)]
    nodes = Nodes(K1)
    cs2, kube2, _ = sync(nodes)
    await cs2.reconcile(View(stale, DRAINED))
    nodes.nodes["k1"] = replace(nodes.nodes["k1"], unschedulable=False)  # uncordoned...
    await cs2.reconcile(View(stale, LIFTED))
    nodes.nodes["k1"] = replace(nodes.nodes["k1"], unschedulable=True)  # ...and cordoned again
    await cs2.reconcile(View(stale, LIFTED))
    cs2.written(wrote("n1"))
    await cs2.reconcile(View(stale, DRAINED))
    assert kube.events == [] and kube2.events == []


async def test_a_nodeset_pod_is_the_operators_to_drain_unless_slinky_mode_is_off() -> None:
    nodeset = [replace(PODS[0], owner_kind="NodeSet", owner_api_version="slinky.slurm.net/v1beta1")]
    for mode, asked in ((None, []), (True, []), (False, [("n1", "drain", OURS)])):
        kube, drains = Kube(), Drains()
        cs = CordonSync(writer_deps(kube=kube, nodes=Nodes(K1), drains=drains, slinky_mode=mode))
        await cs.reconcile(View(nodeset, LIFTED))
        assert drains.asked == asked, mode
    # forced on, a pod of another owner (here a StatefulSet) is the operator's too; auto leaves it ours
    for mode, asked in ((True, []), (None, [("n1", "drain", OURS)])):
        kube, drains = Kube(), Drains()
        cs = CordonSync(writer_deps(kube=kube, nodes=Nodes(K1), drains=drains, slinky_mode=mode))
        await cs.reconcile(View(PODS, LIFTED))
        assert drains.asked == asked, mode


async def test_a_re_drain_queued_before_the_undrain_gets_its_event_when_written() -> None:
    # a drain of n1 still queued (asked on a stale snapshot) when the admin lifts ours: the pass
    # sees n1 undrained but asks nothing (queued already); the batcher's write is the re-apply
    cs, kube, drains = sync()
    await cs.reconcile(View(PODS, DRAINED))
    drains.pending = {"n1": DrainRequest("drain", OURS)}
    await cs.reconcile(View(PODS, LIFTED))
    assert drains.asked == []
    drains.pending = {}
    cs.written(wrote("n1"))
    await cs.reconcile(View(PODS, DRAINED))
    await cs.reconcile(View(PODS, DRAINED))
    assert kube.events == [("w1", "SlurmDrainReapplied")]


async def test_a_re_drain_written_before_any_pass_saw_the_undrain_gets_its_event() -> None:
    cs, kube, _ = sync()
    await cs.reconcile(View(PODS, DRAINED))
    cs.written(wrote("n1"))  # its read (after the sighting) found n1 undrained: ours was lifted
    await cs.reconcile(View(PODS, DRAINED))
    await cs.reconcile(View(PODS, DRAINED))
    assert kube.events == [("w1", "SlurmDrainReapplied")]


async def test_a_first_drain_seen_before_the_batcher_reports_it_is_no_re_drain() -> None:
    cs, kube, _ = sync()
    await cs.reconcile(View(PODS, LIFTED))  # asks the first drain
    read_at = time.monotonic()  # the batch's read: before the write lands
    await cs.reconcile(View(PODS, DRAINED))  # a refresh sees the write before the scontrol returns
    cs.written(wrote("n1", read_at))
    await cs.reconcile(View(PODS, DRAINED))
    assert kube.events == []


async def test_an_event_the_api_server_refused_is_told_at_the_next_pass() -> None:
    cs, kube, _ = sync()
    fail = [True]
    create = kube.create_event

    async def flaky(*args: Any, **kw: Any) -> None:
        if fail.pop(0) if fail else False:
            raise RuntimeError("apiserver: 503")
        await create(*args, **kw)

    kube.create_event = flaky  # type: ignore[method-assign]
    await cs.reconcile(View(PODS, DRAINED))
    await cs.reconcile(View(PODS, LIFTED))
    cs.written(wrote("n1"))
    await cs.reconcile(View(PODS, DRAINED))  # refused: still owed
    assert kube.events == []
    await cs.reconcile(View(PODS, DRAINED))
    await cs.reconcile(View(PODS, DRAINED))
    assert kube.events == [("w1", "SlurmDrainReapplied")]
