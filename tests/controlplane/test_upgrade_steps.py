"""The upgrade's cycle on its own, against a scripted fleet: what it holds in the budget from one
cycle to the next (the end-to-end roll on real Slurm is in test_upgrade.py)."""

from __future__ import annotations

from typing import Any

from sidecars.controlplane.snapshot import FleetNode
from sidecars.controlplane.upgrade import CONFIG_MAP, REASON_PREFIX, Upgrade
from sidecars.kube import Pod
from sidecars.slurm import Version
from tests.helpers import fleet_node, fleet_pod

REASON = REASON_PREFIX + "new"


class Kube:
    """The three calls an upgrade makes; deleting a pod takes it out of the scripted fleet."""

    def __init__(self, fleet: Fleet) -> None:
        self.maps: dict[str, dict[str, str]] = {}
        self.fleet = fleet
        self.reads = 0

    async def get_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        self.reads += 1
        return self.maps.get(name)

    async def put_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
        self.maps[name] = dict(data)

    async def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> bool:
        return self.fleet.pods.pop(name, None) is not None


class Drains:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def submit(self, node: str, action: str, reason: str) -> None:
        self.asked.append((node, action))


class Fleet:
    def __init__(self, *names: str) -> None:
        self.nodes = {n: node(n) for n in names}
        self.pods = {f"pod-{n}": pod(n, "old") for n in names}


def node(name: str, *, drained: bool = False, busy: bool = False) -> FleetNode:
    return fleet_node(name, drained=drained, busy=busy, reason=REASON if drained else None)


def pod(name: str, revision: str) -> Pod:
    return fleet_pod(f"pod-{name}", hostname=name, revision=revision)


def upgrade(fleet: Fleet) -> tuple[Upgrade, Drains]:
    drains = Drains()
    up = Upgrade(
        Kube(fleet),  # type: ignore[arg-type]
        "slurm",
        drains,  # type: ignore[arg-type]
        lambda: fleet.nodes,
        lambda: sorted(fleet.nodes),
        lambda: list(fleet.pods.values()),
        lambda p: p.hostname,
    )
    return up, drains


def upgraded(up: Upgrade) -> dict[str, Any]:
    report = up.report()["upgrade"]
    assert report is not None
    return report


async def test_a_worker_drained_and_replaced_while_paused_frees_its_place_in_the_budget() -> None:
    fleet = Fleet("n1", "n2")
    up, drains = upgrade(fleet)
    await start(up)
    await up.step()
    assert drains.asked == [("n1", "drain")]
    await up.set_paused(True)
    # no cycle sees n1 drained: the drain, the job's end, the delete and the new pod all fall
    # between two snapshots, while paused
    fleet.nodes["n1"] = node("n1", drained=True)
    await up.step()  # paused: the empty worker is still replaced
    assert "pod-n1" not in fleet.pods
    fleet.pods["pod-n1"] = pod("n1", "new")
    await up.step()
    assert drains.asked[-1] == ("n1", "undrain")
    fleet.nodes["n1"] = node("n1")
    await up.set_paused(False)
    await up.step()
    assert drains.asked[-1] == ("n2", "drain"), drains.asked  # n1 no longer holds the only place
    assert upgraded(up)["out_of_service"] == 1


async def test_a_drain_not_yet_seen_holds_its_place() -> None:
    fleet = Fleet("n1", "n2", "n3")
    up, drains = upgrade(fleet)
    await start(up)
    await up.step()
    await up.step()  # the snapshot has not caught up: n1 is not drained yet, still its turn alone
    assert drains.asked == [("n1", "drain")]
    fleet.nodes["n1"] = node("n1", drained=True, busy=True)
    await up.step()
    assert drains.asked == [("n1", "drain")] and "pod-n1" in fleet.pods  # busy: waits for its job
    assert upgraded(up)["nodes"]["n1"] == "waiting for jobs 1"


async def start(up: Upgrade) -> None:
    await up.start("new", "1", controller=Version.parse("24.11.5"), slurmds={}, target=None)


async def test_the_plan_is_read_once_per_term_not_every_cycle() -> None:
    fleet = Fleet("n1", "n2")
    kube = Kube(fleet)
    up = Upgrade(
        kube,  # type: ignore[arg-type]
        "slurm",
        Drains(),  # type: ignore[arg-type]
        lambda: fleet.nodes,
        lambda: sorted(fleet.nodes),
        lambda: list(fleet.pods.values()),
        lambda p: p.hostname,
    )
    for _ in range(5):  # no upgrade started: one read (a 404), then none per cycle
        await up.step()
    assert kube.reads == 1
    await start(up)
    reads = kube.reads
    for _ in range(5):
        await up.step()
    assert kube.reads == reads  # what the leader wrote is the plan
    # a new term (another replica may have written meanwhile): read again, once
    kube.maps[CONFIG_MAP] = {**kube.maps[CONFIG_MAP], "paused": "true"}
    up.forget()
    await up.step()
    await up.step()
    assert kube.reads == reads + 1
    assert up.plan is not None and up.plan.paused
