"""Cordon sync's decisions on their own, against scripted snapshots: the orders in which Slurm, the
snapshot and the drain batcher can report a re-drain (the rules on real Slurm are in
test_cordon_sync.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from sidecars.controlplane.nodesync import CordonSync, cordon_reason
from sidecars.controlplane.snapshot import FleetNode, FleetSnapshot
from sidecars.kube import KubeNode
from tests.helpers import fleet_node, fleet_pod, fleet_snapshot

OURS = cordon_reason("k1")


class Kube:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    async def create_event(
        self, namespace: str, involved: dict[str, str], reason: str, message: str, **_: Any
    ) -> None:
        self.events.append((involved["name"], reason))


class Nodes:
    def __init__(self) -> None:
        self.nodes = {
            "k1": KubeNode(name="k1", annotations={}, unschedulable=True, taints=(), resource_version="1")
        }
        self.synced = asyncio.Event()
        self.synced.set()


class Drains:
    def __init__(self) -> None:
        self.pending: dict[str, Any] = {}
        self.asked: list[tuple[str, str, str]] = []

    def submit(self, node: str, action: str, reason: str) -> None:
        self.asked.append((node, action, reason))


def snapshot(*nodes: FleetNode) -> FleetSnapshot:
    return fleet_snapshot(nodes)


def sync() -> tuple[CordonSync, Kube, Drains]:
    kube, drains = Kube(), Drains()
    cs = CordonSync(kube, Nodes(), drains, lambda p: p.hostname)  # type: ignore[arg-type]
    return cs, kube, drains


PODS = [fleet_pod("w1", hostname="n1", node_name="k1")]
DRAINED = snapshot(fleet_node("n1", drained=True, reason=OURS))
LIFTED = snapshot(fleet_node("n1"))  # an admin ran `scontrol update state=resume`


async def test_a_re_drain_seen_before_the_batcher_reports_it_still_gets_its_event() -> None:
    cs, kube, drains = sync()
    await cs.cycle(PODS, DRAINED)
    await cs.cycle(PODS, LIFTED)
    assert drains.asked == [("n1", "drain", OURS)]
    await cs.cycle(PODS, DRAINED)  # the write landed: the snapshot sees it first
    cs.written({"n1"})  # then the batcher's scontrol returns
    await cs.cycle(PODS, DRAINED)
    await cs.cycle(PODS, DRAINED)
    assert kube.events == [("w1", "SlurmDrainReapplied")]


async def test_a_re_drain_reported_by_the_batcher_first_gets_one_event() -> None:
    cs, kube, _ = sync()
    await cs.cycle(PODS, DRAINED)
    await cs.cycle(PODS, LIFTED)
    cs.written({"n1"})
    await cs.cycle(PODS, DRAINED)
    await cs.cycle(PODS, DRAINED)
    assert kube.events == [("w1", "SlurmDrainReapplied")]


async def test_someone_elses_drain_in_between_is_no_re_drain() -> None:
    cs, kube, _ = sync()
    await cs.cycle(PODS, DRAINED)
    await cs.cycle(PODS, LIFTED)
    await cs.cycle(PODS, snapshot(fleet_node("n1", drained=True, reason="admin: bad dimm")))
    cs.written({"n1"})
    await cs.cycle(PODS, snapshot(fleet_node("n1", drained=True, reason="admin: bad dimm")))
    assert kube.events == []
