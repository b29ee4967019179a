"""The record keeper's guards, where no Slurm answer is needed (the deletes themselves, and Slurm's
answers, are in test_node_records.py on real dynamic nodes): nothing is deleted on a read from an
unreachable controller or a stale one, nor when more than half of the dynamic records look like
ghosts at once; a node no worker pod was ever seen to hold is not ours; the grace is waited."""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry

from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.controlplane.fleet.snapshot import FleetNode, FleetSnapshot
from sidecars.controlplane.reconcile import RecordKeeper, View
from sidecars.controlplane.settings import RecordSettings
from sidecars.kube import Pod
from sidecars.runtime.events import LogEventSink
from sidecars.slurm import SlurmClient
from tests.controlplane.conftest import writer_deps
from tests.controlplane.reconcile.standins import Drains
from tests.helpers import fleet_node, fleet_pod, fleet_snapshot


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class NoSlurm(SlurmClient):
    """Any command it is asked to run fails the test: the guards decide before Slurm is asked."""

    async def run(self, *argv: str, **kw: object) -> object:  # type: ignore[override]
        raise AssertionError(f"Slurm asked: {argv}")


def dynamic(name: str) -> FleetNode:
    return dataclasses.replace(fleet_node(name), flags=("DYNAMIC_NORM",))


def keeper(clock: Clock, grace: float = 5.0) -> tuple[RecordKeeper, CollectorRegistry]:
    registry = CollectorRegistry()

    async def emit(pod: Pod, reason: str, message: str, type: str) -> None:
        raise AssertionError("no pod event expected")

    keeper = RecordKeeper(
        writer_deps(
            slurm=NoSlurm(),
            drains=Drains(),
            metrics=ControlPlaneMetrics(registry),
            events=LogEventSink(),
            emit=emit,
            clock=clock,
        ),
        policy=RecordSettings(grace_seconds=grace, deletes_per_pass=2, stale_seconds=60.0),
        wall=clock,
    )
    return keeper, registry


def workers(*names: str) -> list[Pod]:
    return [fleet_pod(f"w-{n}", hostname=n) for n in names]


def at(clock: Clock, nodes: list[FleetNode], **kw: object) -> FleetSnapshot:
    return dataclasses.replace(fleet_snapshot(nodes, taken_at=clock.now), **kw)  # type: ignore[arg-type]


async def test_no_delete_on_an_unreachable_or_stale_read_and_the_grace_is_waited() -> None:
    clock = Clock()
    rk, registry = keeper(clock)
    nodes = [dynamic(f"n{i}") for i in range(1, 5)]
    assert (await rk.reconcile(View(workers("n1", "n2", "n3", "n4"), at(clock, nodes)))).writes == 0
    pods = workers("n1", "n2", "n3")  # n4's pod is gone
    assert (await rk.reconcile(View(pods, at(clock, nodes)))).writes == 0
    assert rk.orphaned == {"n4": 1000.0}
    clock.now += 4.0  # within the grace: nothing asked of Slurm (NoSlurm would fail)
    assert (await rk.reconcile(View(pods, at(clock, nodes)))).writes == 0
    clock.now += 10.0
    down = await rk.reconcile(View(pods, at(clock, nodes, reachable=False, error="timed out")))
    assert down.skipped == "the controller does not answer"
    stale = await rk.reconcile(View(pods, at(clock, nodes, taken_at=clock.now - 61)))
    assert stale.skipped == "the fleet read is stale"
    assert registry.get_sample_value("slurm_sidecars_node_records", {"state": "orphaned"}) == 1


async def test_more_than_half_the_records_gone_at_once_is_held_for_a_human() -> None:
    clock = Clock()
    rk, registry = keeper(clock, grace=0.0)
    nodes = [dynamic(f"n{i}") for i in range(1, 5)]
    await rk.reconcile(View(workers("n1", "n2", "n3", "n4"), at(clock, nodes)))
    # a pod read that lost three of four (or a lost rack): not for us to clean up
    assert (await rk.reconcile(View(workers("n1"), at(clock, nodes)))).writes == 0
    assert registry.get_sample_value("slurm_sidecars_node_record_actions_total", {"action": "held"}) == 1


async def test_a_node_no_worker_pod_was_seen_to_hold_is_not_ours() -> None:
    clock = Clock()
    rk, _ = keeper(clock, grace=0.0)
    nodes = [dynamic("n1"), dynamic("other"), fleet_node("static")]  # a dynamic node of someone else's
    await rk.reconcile(View(workers("n1"), at(clock, nodes)))
    clock.now += 100.0
    assert (await rk.reconcile(View(workers("n1"), at(clock, nodes)))).writes == 0
    assert rk.orphaned == {}
