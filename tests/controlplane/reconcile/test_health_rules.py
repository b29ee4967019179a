"""Health sync's decisions on their own, against scripted snapshots and a scripted clock: which Node
conditions and taints count, the settle time against flaps, the cap against a fleet-wide signal, a
drain of anyone else's left alone, and Slinky's own cordons left to it (the rules
on real Slurm are in test_health_signals.py)."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import CollectorRegistry

from sidecars.controlplane.flag_kinds import SIGNALS
from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.controlplane.fleet.snapshot import FleetNode, FleetSnapshot
from sidecars.controlplane.reconcile import HealthSync, Signals, View
from sidecars.controlplane.reconcile.health_signals import health_reason
from sidecars.controlplane.settings import HealthSettings
from sidecars.kube import KubeNode, Pod
from sidecars.runtime.settings import ConfigError
from tests.controlplane.conftest import writer_deps
from tests.controlplane.reconcile.standins import Drains, Nodes
from tests.helpers import fleet_node, fleet_pod, fleet_snapshot

CORDON = "nodeset.slinky.slurm.net/pod-cordon"
NPD = Signals(conditions=(("KernelDeadlock", ""),), taints=(("nvsentinel.dgxc.nvidia.com/quarantine", ""),))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def host(
    name: str,
    conditions: tuple[tuple[str, str, str, str], ...] = (),
    taints: dict[str, tuple[str, str]] | None = None,
) -> KubeNode:
    taints = taints or {}
    return KubeNode(
        name=name,
        annotations={},
        unschedulable=False,
        taints=tuple((k, effect) for k, (_, effect) in taints.items()),
        taint_values={k: v for k, (v, _) in taints.items()},
        resource_version="1",
        conditions=(("Ready", "True", "KubeletReady", ""), *conditions),
    )


DEADLOCK = ("KernelDeadlock", "True", "DockerHung", "task docker:7 blocked for more than 120 seconds.")


def setup(
    *hosts: KubeNode, settle: float = 0.0, fraction: float = 1.0, slinky: bool | None = False
) -> tuple[HealthSync, Drains, Clock, list[tuple[str, str]], CollectorRegistry]:
    drains, clock = Drains(), Clock()
    events: list[tuple[str, str]] = []
    registry = CollectorRegistry()
    metrics = ControlPlaneMetrics(registry)

    async def emit(pod: Pod, reason: str, message: str, type: str) -> None:
        events.append((pod.name, reason))

    sync = HealthSync(
        writer_deps(
            nodes=Nodes(*hosts), drains=drains, metrics=metrics, emit=emit, slinky_mode=slinky, clock=clock
        ),
        HealthSettings(
            conditions=NPD.conditions, taints=NPD.taints, settle_seconds=settle, max_fraction=fraction
        ),
    )
    return sync, drains, clock, events, registry


def pods(n: int, kube_node: str = "k1") -> list[Pod]:
    return [fleet_pod(f"w{i}", hostname=f"n{i}", node_name=kube_node) for i in range(1, n + 1)]


def snap(*nodes: FleetNode) -> FleetSnapshot:
    return fleet_snapshot(nodes)


async def run(sync: HealthSync, p: list[Pod], s: FleetSnapshot) -> int:
    return (await sync.reconcile(View(p, s))).writes


async def test_only_the_configured_signals_count_each_as_configured() -> None:
    quarantine = "nvsentinel.dgxc.nvidia.com/quarantine"
    cases = {
        "condition True": (host("k1", (DEADLOCK,)), True),
        "condition False": (host("k1", (("KernelDeadlock", "False", "KernelHasNoDeadlock", ""),)), False),
        "another condition": (
            host("k1", (("ReadonlyFilesystem", "True", "FilesystemIsReadOnly", ""),)),
            False,
        ),
        "taint NoExecute": (host("k1", taints={quarantine: ("true", "NoExecute")}), True),
        "taint NoSchedule": (host("k1", taints={quarantine: ("", "NoSchedule")}), True),
        "taint PreferNoSchedule": (host("k1", taints={quarantine: ("true", "PreferNoSchedule")}), False),
        "other taint": (host("k1", taints={"example.com/other": ("x", "NoExecute")}), False),
    }
    for what, (kube_node, drains_it) in cases.items():
        sync, drains, *_ = setup(kube_node)
        await run(sync, pods(1), snap(fleet_node("n1")))
        assert bool(drains.asked) == drains_it, what
    # a value given must match; a status given replaces True
    valued = Signals(conditions=(("GpuHealthy", "False"),), taints=((quarantine, "fault"),))
    assert valued.of(host("k1", (("GpuHealthy", "False", "GpuXid79", "XID 79 on GPU 0"),)))
    assert not valued.of(host("k1", (("GpuHealthy", "True", "", ""),)))
    assert not valued.of(host("k1", taints={quarantine: ("ok", "NoSchedule")}))
    assert valued.of(host("k1", taints={quarantine: ("fault", "NoSchedule")}))


async def test_the_reason_names_the_signal_and_the_node_and_clearing_undrains_only_ours() -> None:
    sync, drains, _, events, registry = setup(host("k1", (DEADLOCK,)))
    await run(sync, pods(2), snap(fleet_node("n1"), fleet_node("n2", drained=True, reason="admin: DIMM")))
    ours = health_reason("KernelDeadlock", "k1")
    assert ours == "slurm-sidecars: health KernelDeadlock on kubernetes node k1"
    assert drains.asked == [("n1", "drain", ours)]  # n2's admin drain stands: nothing asked
    assert sync.seen["n2"].state == "other_drain" and sync.seen["n1"].state == "drained"
    assert events == [("w1", "SlurmHealthDrain")]
    assert registry.get_sample_value("slurm_sidecars_health_signals", {"signal": "KernelDeadlock"}) == 2
    assert registry.get_sample_value("slurm_sidecars_health_nodes", {"state": "other_drain"}) == 1

    sync.deps.nodes.nodes["k1"] = host("k1")  # the condition cleared
    drains.asked.clear()
    await run(
        sync,
        pods(2),
        snap(
            fleet_node("n1", drained=True, reason=ours), fleet_node("n2", drained=True, reason="admin: DIMM")
        ),
    )
    assert drains.asked == [("n1", "undrain", ours)]  # the exact reason: only ours is undone
    await run(sync, pods(2), snap(fleet_node("n1", drained=True, reason=ours)))  # before Slurm shows it
    assert len(drains.asked) == 1 and len(events) == 2  # asked once, told once
    assert sync.status()["nodes"] == {}


async def test_a_signal_shorter_than_the_settle_time_drains_nothing_and_a_clear_waits_as_long() -> None:
    sick, well = host("k1", (DEADLOCK,)), host("k1")
    sync, drains, clock, *_ = setup(sick, settle=30.0)
    nodes = sync.deps.nodes.nodes
    idle = snap(fleet_node("n1"))
    await run(sync, pods(1), idle)
    clock.now += 29
    await run(sync, pods(1), idle)
    assert drains.asked == [] and sync.seen["n1"].state == "waiting"
    nodes["k1"] = well  # the flap ends before the settle time: never drained
    clock.now += 1
    await run(sync, pods(1), idle)
    nodes["k1"] = sick  # and starts again: its clock starts again too
    clock.now += 1
    await run(sync, pods(1), idle)
    assert drains.asked == []
    clock.now += 30
    await run(sync, pods(1), idle)
    ours = health_reason("KernelDeadlock", "k1")
    assert drains.asked == [("n1", "drain", ours)]

    drained = snap(fleet_node("n1", drained=True, reason=ours))
    nodes["k1"] = well
    await run(sync, pods(1), drained)
    clock.now += 29
    await run(sync, pods(1), drained)
    assert drains.asked == [("n1", "drain", ours)]  # gone for 29 s: still held
    clock.now += 1
    await run(sync, pods(1), drained)
    assert drains.asked[-1] == ("n1", "undrain", ours)


async def test_a_fleet_wide_signal_drains_at_most_the_cap_and_the_rest_wait_with_one_event_each() -> None:
    sync, drains, _, events, registry = setup(host("k1", (DEADLOCK,)), fraction=0.2)
    ten = pods(10)
    assert sync.cap(10) == 2 and sync.cap(3) == 1  # never 0: one node can always be drained
    idle = snap(*(fleet_node(f"n{i}") for i in range(1, 11)))
    await run(sync, ten, idle)
    assert [a[0] for a in drains.asked] == ["n1", "n10"]  # two, in name order
    assert sorted(n for n, s in sync.seen.items() if s.state == "capped") == [f"n{i}" for i in range(2, 10)]
    capped = [p for p, r in events if r == "SlurmHealthDrainCapped"]
    assert len(capped) == 8
    # a pass before the snapshot shows the drains (still queued or being written): counted all the same
    await run(sync, ten, idle)
    assert len(drains.asked) == 2
    # the next pass sees the two drained: still at the cap, no new drain, no second Event
    ours = health_reason("KernelDeadlock", "k1")
    held = {"n1", "n10"}
    now = snap(
        *(
            fleet_node(f"n{i}", drained=f"n{i}" in held, reason=ours if f"n{i}" in held else None)
            for i in range(1, 11)
        )
    )
    await run(sync, ten, now)
    assert len(drains.asked) == 2 and len([r for _, r in events if r == "SlurmHealthDrainCapped"]) == 8
    assert registry.get_sample_value("slurm_sidecars_health_nodes", {"state": "capped"}) == 8


async def test_slinky_pods_are_drained_by_our_reason_except_where_the_operator_cordoned_the_pod() -> None:
    sync, drains, *_ = setup(host("k1", (DEADLOCK,)), slinky=None)
    nodeset = [
        replace(p, owner_kind="NodeSet", owner_api_version="slinky.slurm.net/v1beta1") for p in pods(4)
    ]
    nodeset[1] = replace(nodeset[1], annotations={CORDON: "true"})  # the operator's own cordon (a scale-in)
    op = "slurm-operator: Node (k1) was cordoned, Pod (slurm/w3) must be cordoned"
    idle = snap(
        fleet_node("n1"),
        fleet_node("n2"),
        fleet_node("n3", drained=True, reason=op),
        fleet_node("n4", drained=True, reason="admin: fan"),
    )
    await run(sync, nodeset, idle)
    # a reason the operator leaves alone (not its prefix); its own cordon and drain stay its own
    assert drains.asked == [("n1", "drain", health_reason("KernelDeadlock", "k1"))]
    assert {n: s.state for n, s in sync.seen.items()} == {
        "n1": "drained",
        "n2": "other_drain",
        "n3": "other_drain",
        "n4": "other_drain",
    }


async def test_a_pod_going_away_keeps_our_drain_until_it_is_gone() -> None:
    sync, drains, *_ = setup(host("k1"))
    ours = health_reason("KernelDeadlock", "k1")
    leaving = [replace(pods(1)[0], deleting=True)]
    await run(sync, leaving, snap(fleet_node("n1", drained=True, reason=ours)))
    assert drains.asked == []  # its drain hook owns the node now; ours keeps jobs off meanwhile
    await run(sync, pods(1), snap(fleet_node("n1", drained=True, reason=ours)))
    assert drains.asked == [("n1", "undrain", ours)]


async def test_signal_names_are_checked_when_read() -> None:
    assert SIGNALS.parse("KernelDeadlock, GpuHealthy=False", "--health-conditions") == (
        ("KernelDeadlock", ""),
        ("GpuHealthy", "False"),
    )
    for bad in ("a b", "x=y=z", "k:v", "A,A"):
        try:
            SIGNALS.parse(bad, "--health-taints")
        except ConfigError as exc:
            assert "--health-taints" in str(exc)
        else:
            raise AssertionError(f"accepted {bad!r}")
