"""A drain nobody owns is said once, as a Warning Event on its worker pod (or on the control plane's
own object for a node with no pod), again only when it changes; ours and the operator's are never
said; a burst is paced (the rules on real Slurm are in tests/controlplane/fleet/test_unowned_drains.py)."""

from __future__ import annotations

from dataclasses import replace

from sidecars.controlplane.fleet import unowned
from sidecars.controlplane.reconcile import UnownedDrainEvents, View
from sidecars.controlplane.reconcile.unowned_events import EVENT_REASON
from sidecars.kube import Pod
from sidecars.runtime.events import EventType
from tests.controlplane.conftest import writer_deps
from tests.helpers import fleet_node, fleet_pod, fleet_snapshot


class Said:
    def __init__(self) -> None:
        self.on_pods: list[tuple[str, str, str, EventType]] = []
        self.on_plane: list[tuple[str, str, EventType]] = []

    async def __call__(self, pod: Pod, reason: str, message: str, type: EventType) -> None:
        self.on_pods.append((pod.name, reason, message, type))

    async def emit(self, reason: str, message: str, type: EventType = "Normal") -> None:
        self.on_plane.append((reason, message, type))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def node_of(pod: Pod) -> str:
    return pod.name.removeprefix("pod-")


async def test_each_unowned_drain_is_said_once_where_it_is_seen() -> None:
    said, clock = Said(), Clock()
    events = UnownedDrainEvents(writer_deps(node_of=node_of, emit=said, events=said, clock=clock), qps=100)
    nodes = [
        replace(fleet_node("n1", drained=True, reason="Prolog error"), reason_since=1700000000),
        fleet_node("n2", drained=True, reason="slurm-sidecars: maintenance w1"),
        fleet_node("n3", drained=True, reason="slurm-operator: scale-in"),
        fleet_node("n4", drained=True, reason="bad DIMM, ticket 7"),
        fleet_node("n5", state="DOWN", reason="Not responding"),
        fleet_node("n6"),
    ]
    pods = [fleet_pod(f"pod-n{i}") for i in (1, 2, 3, 4, 6)]  # n5 has no pod: the plane's object
    view = View(pods, fleet_snapshot(nodes))
    assert (await events.reconcile(view)).writes == 3
    assert sorted((p, r, t) for p, r, _, t in said.on_pods) == [
        ("pod-n1", EVENT_REASON, "Warning"),
        ("pod-n4", EVENT_REASON, "Warning"),
    ]
    assert [(r, t) for r, _, t in said.on_plane] == [(EVENT_REASON, "Warning")]
    by_pod = {p: m for p, _, m, _ in said.on_pods}
    assert "'Prolog error' (prolog; nobody set it but Slurm)" in by_pod["pod-n1"]
    assert "(unknown; not set by slurm-sidecars or Slinky's operator)" in by_pod["pod-n4"]
    assert "Slurm node n5 is DOWN for 'Not responding' (not_responding" in said.on_plane[0][1]

    # the same drains again: nothing new is said
    assert (await events.reconcile(view)).writes == 0
    # n1 drained again by Slurm (a new time): said again; n4 back in service, then drained again
    again = [replace(nodes[0], reason_since=1700000500), *nodes[1:3], fleet_node("n4"), *nodes[4:]]
    assert (await events.reconcile(View(pods, fleet_snapshot(again)))).writes == 1
    assert (await events.reconcile(View(pods, fleet_snapshot([again[0], *nodes[1:]])))).writes == 1
    assert [p for p, *_ in said.on_pods] == ["pod-n1", "pod-n4", "pod-n1", "pod-n4"]


async def test_a_fleet_of_unowned_drains_is_said_at_the_paced_rate() -> None:
    said, clock = Said(), Clock()
    events = UnownedDrainEvents(writer_deps(node_of=node_of, emit=said, events=said, clock=clock), qps=2)
    nodes = [fleet_node(f"x{i}", state="DOWN", reason="not_provisioned") for i in range(50)]
    view = View([], fleet_snapshot(nodes))
    assert (await events.reconcile(view)).writes == 2  # the bucket's capacity, not 50 at once
    clock.now += 5
    assert (await events.reconcile(view)).writes == 2  # capacity again (10 tokens earned, 2 kept)
    while len(said.on_plane) < 50:
        clock.now += 1
        await events.reconcile(view)
    assert len({m for _, m, _ in said.on_plane}) == 50  # each said once, none twice


def test_status_counts_every_class_and_lists_the_oldest_first() -> None:
    nodes = [
        replace(fleet_node("b", drained=True, reason="Kill task failed"), reason_since=20),
        replace(fleet_node("a", drained=True, reason="Kill task failed"), reason_since=10),
        fleet_node("c", drained=True, reason="bad fan"),
        fleet_node("d", drained=True, reason="slurm-sidecars: drain by cli"),
    ]
    body = unowned.status(unowned.find(nodes))
    assert [n["node"] for n in body["nodes"]] == ["a", "b", "c"]  # unknown age last
    assert body["counts"]["kill_task"] == 2 and body["counts"]["unknown"] == 1
    assert body["counts"]["prolog"] == 0  # every class present: a series never just vanishes
