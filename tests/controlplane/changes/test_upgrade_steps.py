"""The upgrade's cycle on its own, against a scripted fleet: what it holds in the budget from one
cycle to the next (the end-to-end roll on real Slurm is in test_upgrade.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sidecars.controlplane.changes.deploy_roll import ANNOTATION, COST, FIRST, DeploymentRoll
from sidecars.controlplane.changes.upgrade import CONFIG_MAP, Upgrade
from sidecars.controlplane.fleet.snapshot import FleetNode
from sidecars.kube import Deployment, Pod, ReplicaSet
from sidecars.protocol.drains import UPGRADE as REASON_PREFIX
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


class DeploymentKube:
    """A Deployment and its ReplicaSets as the roll reads them; an unpause lets the 'controller'
    move `moves` pods from the old ReplicaSet to the new one."""

    def __init__(self, *, template: str = "v2", paused: bool = True) -> None:
        self.d = Deployment(
            namespace="slurm",
            name="workers",
            generation=2,
            replicas=4,
            paused=paused,
            strategy="RollingUpdate",
            max_surge=0,
            max_unavailable=1,
            selector={"app": "slurmd"},
            template=template,
            annotations={ANNOTATION: "old"},
            observed_generation=2,
            available=4,
            updated=0,
        )
        self.sets = {"old": 4, "new": 0}
        self.patches: list[dict[str, Any]] = []
        self.costs: list[str] = []

    async def get_deployment(self, namespace: str, name: str) -> Deployment:
        return self.d

    async def patch_deployment(self, namespace: str, name: str, patch: dict[str, Any]) -> Deployment:
        self.patches.append(patch)
        spec = patch.get("spec", {})
        if spec.get("paused") is False:
            take = spec["strategy"]["rollingUpdate"]["maxUnavailable"]
            self.sets = {"old": self.sets["old"] - 2, "new": self.sets["new"] + 2}
            self.took = take
        self.d = replace(self.d, paused=spec.get("paused", self.d.paused))
        return self.d

    async def list_replica_sets(self, namespace: str, selector: str) -> list[ReplicaSet]:
        return [
            ReplicaSet(name=f"workers-{h}", revision=h, replicas=n, owner="workers")
            for h, n in self.sets.items()
        ]

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.costs.append(name)


def old_pod(name: str, *, ready: bool = True, cost: str | None = None) -> Pod:
    return replace(
        pod(name, "old"),
        labels={"pod-template-hash": "old"},
        uid=f"uid-{name}",
        ready=ready,
        owner_kind="ReplicaSet",
        annotations={COST: cost} if cost else {},
    )


async def test_a_handover_unpauses_for_exactly_the_empty_pods_and_pauses_once_the_sets_add_up() -> None:
    kube = DeploymentKube()
    roll = DeploymentRoll(kube, "slurm", poll=0.001)  # type: ignore[arg-type]
    pods = [old_pod("n1"), old_pod("n2", ready=False), old_pod("n3"), old_pod("n4")]
    await roll.step("workers", "old", "v1", "", pods, pods[:2])
    assert kube.costs == ["pod-n1", "pod-n2"] and kube.patches == []  # costs first, unpaused next cycle
    assert roll.cost(pods[0]) == FIRST and roll.cost(pods[2]) is None  # the scale-in ranking keeps off
    marked = [replace(p, annotations={COST: str(FIRST)}) for p in pods[:2]] + pods[2:]
    await roll.step("workers", "old", "v1", "", marked, marked[:2])
    # n2 is unready: one of the two the controller may take, not one more
    unpause, pause = kube.patches
    assert unpause["spec"]["paused"] is False and kube.took == 2
    assert unpause["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    assert pause["spec"]["paused"] is True and kube.sets == {"old": 2, "new": 2}


async def test_an_unchanged_template_hands_nothing_over_and_a_restart_mid_handover_pauses() -> None:
    kube = DeploymentKube(template="v1", paused=False)
    roll = DeploymentRoll(kube, "slurm", poll=0.001)  # type: ignore[arg-type]
    pods = [old_pod(f"n{i}", cost=str(FIRST)) for i in range(1, 5)]
    await roll.step("workers", "old", "v1", "", pods, pods[:1])
    assert not roll.template_changed and [p["spec"]["paused"] for p in kube.patches] == [True]
    kube = DeploymentKube(paused=False)  # left unpaused by a control plane that stopped mid-handover
    roll = DeploymentRoll(kube, "slurm", poll=0.001)  # type: ignore[arg-type]
    await roll.step("workers", "old", "v1", "", pods, pods[:1])
    assert [p["spec"]["paused"] for p in kube.patches] == [True]  # the sets add up: paused, no handover
    assert "add up" in roll.waiting


async def test_a_pod_no_longer_handed_over_gets_its_ranked_cost_back_before_the_next_handover() -> None:
    kube = DeploymentKube()
    roll = DeploymentRoll(kube, "slurm", poll=0.001)  # type: ignore[arg-type]
    pods = [old_pod("n1", cost=str(FIRST)), old_pod("n2", cost=str(FIRST)), old_pod("n3"), old_pod("n4")]
    await roll.step("workers", "old", "v1", "", pods, pods[:2])
    assert roll.cost(pods[1]) == FIRST and len(kube.patches) == 2  # both handed over
    kube = DeploymentKube()
    roll.kube = kube  # type: ignore[assignment]
    # n1 was undrained by an admin and runs a job again: only n2 is empty
    await roll.step("workers", "old", "v1", "", pods, pods[1:2])
    assert roll.cost(pods[0]) is None and kube.patches == []  # not unpaused while n1 would tie with n2
    assert "deletion cost of pod-n1" in roll.waiting
    pods[0] = old_pod("n1", cost="4")  # the scale-in ranking wrote its cost again
    await roll.step("workers", "old", "v1", "", pods, pods[1:2])
    assert [p["spec"]["paused"] for p in kube.patches] == [False, True]


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
