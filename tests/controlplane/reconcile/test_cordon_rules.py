"""Cordon sync's decisions on their own, against scripted snapshots: the orders in which Slurm, the
snapshot and the drain batcher can report a re-drain (the rules on real Slurm are in
test_cordon_sync.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sidecars.controlplane.fleet.snapshot import FleetNode, FleetSnapshot
from sidecars.controlplane.reconcile import View
from sidecars.controlplane.reconcile.cordons import CordonSync, cordon_reason
from sidecars.kube import KubeNode
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


def sync(nodes: Nodes | None = None) -> tuple[CordonSync, Kube, Drains]:
    kube, drains = Kube(), Drains()
    cs = CordonSync(kube, nodes or Nodes(K1), drains, lambda p: p.hostname)  # type: ignore[arg-type]
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
    cs.written({"n1"})  # then the batcher's scontrol returns
    await cs.reconcile(View(PODS, DRAINED))
    await cs.reconcile(View(PODS, DRAINED))
    assert kube.events == [("w1", "SlurmDrainReapplied")]


async def test_a_re_drain_reported_by_the_batcher_first_gets_one_event() -> None:
    cs, kube, _ = sync()
    await cs.reconcile(View(PODS, DRAINED))
    await cs.reconcile(View(PODS, LIFTED))
    cs.written({"n1"})
    await cs.reconcile(View(PODS, DRAINED))
    await cs.reconcile(View(PODS, DRAINED))
    assert kube.events == [("w1", "SlurmDrainReapplied")]


async def test_someone_elses_drain_in_between_is_no_re_drain() -> None:
    cs, kube, _ = sync()
    await cs.reconcile(View(PODS, DRAINED))
    await cs.reconcile(View(PODS, LIFTED))
    await cs.reconcile(View(PODS, snapshot(fleet_node("n1", drained=True, reason="admin: bad dimm"))))
    cs.written({"n1"})
    await cs.reconcile(View(PODS, snapshot(fleet_node("n1", drained=True, reason="admin: bad dimm"))))
    assert kube.events == []


async def test_a_new_leader_knows_a_lifted_drain_was_ours_from_the_pods_condition() -> None:
    # the last leader drained n1 and its condition writer said so on the pod; an admin lifted the
    # drain while no leader ran: the new leader's first look re-drains it with the Event
    marked = [fleet_pod("w1", hostname="n1", node_name="k1", conditions=MARKED)]
    cs, kube, drains = sync()
    await cs.reconcile(View(marked, LIFTED))
    cs.written({"n1"})
    await cs.reconcile(View(marked, DRAINED))
    assert drains.asked == [("n1", "drain", OURS)]
    assert kube.events == [("w1", "SlurmDrainReapplied")]


async def test_a_first_cordon_or_a_stale_condition_is_no_re_drain() -> None:
    cs, kube, _ = sync()
    await cs.reconcile(View(PODS, LIFTED))  # never drained: a first drain, no Event
    cs.written({"n1"})
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
    cs2.written({"n1"})
    await cs2.reconcile(View(stale, DRAINED))
    assert kube.events == [] and kube2.events == []


async def test_a_nodeset_pod_is_the_operators_to_drain_unless_slinky_mode_is_off() -> None:
    nodeset = [replace(PODS[0], owner_kind="NodeSet", owner_api_version="slinky.slurm.net/v1beta1")]
    for mode, asked in ((None, []), (True, []), (False, [("n1", "drain", OURS)])):
        kube, drains = Kube(), Drains()
        cs = CordonSync(kube, Nodes(K1), drains, lambda p: p.hostname, slinky_mode=mode)  # type: ignore[arg-type]
        await cs.reconcile(View(nodeset, LIFTED))
        assert drains.asked == asked, mode
    # forced on, a pod of another owner (here a StatefulSet) is the operator's too; auto leaves it ours
    for mode, asked in ((True, []), (None, [("n1", "drain", OURS)])):
        kube, drains = Kube(), Drains()
        cs = CordonSync(kube, Nodes(K1), drains, lambda p: p.hostname, slinky_mode=mode)  # type: ignore[arg-type]
        await cs.reconcile(View(PODS, LIFTED))
        assert drains.asked == asked, mode
