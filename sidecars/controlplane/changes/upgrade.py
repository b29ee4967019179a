"""Rolling upgrades of the worker pods, paced by the control plane under a drain budget.

A Deployment's pods are paced too, through its pause and its pods' deletion costs (deployroll.py);
what follows is the StatefulSet's way, and the budget's rules, which are the same for both.

The workload is changed first (new image in the StatefulSet, `updateStrategy: OnDelete`, so that
Kubernetes replaces a pod only when it is deleted). Then `upgrade start --revision R --budget B`:
every cycle the leader keeps at most B workers out of service (drained by us for this upgrade, or
deleted and not yet back), drains the next old-revision workers in the scale-in order (idle ones
first, then those whose jobs end soonest), deletes a drained worker's pod once it runs nothing, and
undrains the node once its pod runs the new revision. No job is ever killed: a worker waits for its
jobs. The plan lives in the ConfigMap `slurm-sidecars-upgrade`, so a restart or a new leader goes on.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import structlog

from sidecars.controlplane.changes.budget import UpgradeError, parse_budget
from sidecars.controlplane.changes.cluster_upgrade.window import release_distance, window
from sidecars.controlplane.changes.deploy_roll import DeploymentRoll, Refused
from sidecars.controlplane.fleet.drains import DrainBatcher
from sidecars.controlplane.fleet.snapshot import FleetNode
from sidecars.kube import KubeClient, Pod
from sidecars.protocol import drains
from sidecars.protocol.events import EventReason
from sidecars.slurm import Version

log = structlog.get_logger(__name__)

CONFIG_MAP = "slurm-sidecars-upgrade"
# the label carrying a pod's template revision: StatefulSet's, then a Deployment's ReplicaSet's
REVISION_LABELS = ("controller-revision-hash", "pod-template-hash")


def revision(pod: Pod) -> str:
    return next((pod.labels[k] for k in REVISION_LABELS if pod.labels.get(k)), "")


def skew_error(
    controller: Version,
    slurmds: Mapping[str, Version],
    target: Version | None,
    slurmdbd: Version | None = None,
) -> str | None:
    """Why the roll would break Slurm's version rules, or None. Order: slurmdbd, slurmctld, slurmd;
    each accepts the releases of Slurm's window behind it (3 since 24.11, else 2)."""
    order = "upgrade slurmdbd first, then slurmctld, then the slurmd workers"
    if slurmdbd is not None and (slurmdbd.major, slurmdbd.minor) < (controller.major, controller.minor):
        return f"slurmdbd {slurmdbd} is older than slurmctld {controller}: {order}"
    for name, v in sorted(slurmds.items()):
        if (v.major, v.minor) > (controller.major, controller.minor):
            return f"the controller, slurmctld {controller}, is older than slurmd {v} on {name}: {order}"
    most = window(controller)
    if target is not None:
        if (target.major, target.minor) > (controller.major, controller.minor):
            return f"target slurmd {target} is newer than slurmctld {controller}: {order}"
        if release_distance(controller, target) > most:
            return f"target slurmd {target} is more than {most} releases behind slurmctld {controller}"
    for name, v in sorted(slurmds.items()):
        if release_distance(controller, v) > most:
            return f"the slurmd on {name} ({v}) is more than {most} releases behind slurmctld {controller}"
    return None


@dataclass(frozen=True, slots=True)
class UpgradePlan:
    revision: str
    budget: str
    paused: bool = False
    slurm_version: str = ""
    started_at: float = 0.0
    kind: str = "StatefulSet"  # or Deployment: paced through its pause (deployroll.py)
    workload: str = ""  # the Deployment's name
    from_revision: str = ""  # a Deployment's old pods' pod-template-hash
    template: str = ""  # the digest of the Deployment's template when the upgrade started
    restore: str = ""  # the Deployment's own rollingUpdate, put back at the end (JSON)

    @property
    def reason(self) -> str:
        return drains.UPGRADE + self.revision

    def data(self) -> dict[str, str]:
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in asdict(self).items()}

    @classmethod
    def from_data(cls, data: Mapping[str, str]) -> UpgradePlan | None:
        if not data.get("revision") or not data.get("budget"):
            return None
        try:
            started = float(data.get("started_at", "0"))
        except ValueError:
            started = 0.0
        return cls(
            data["revision"],
            data["budget"],
            data.get("paused") == "true",
            data.get("slurm_version", ""),
            started,
            data.get("kind", "StatefulSet"),
            data.get("workload", ""),
            data.get("from_revision", ""),
            data.get("template", ""),
            data.get("restore", ""),
        )

    def old(self, pod: Pod) -> bool:
        """Still on the old template: a StatefulSet's pod not on the new revision; a Deployment's
        pod of the old ReplicaSet (the new one's hash is Kubernetes' to pick)."""
        if self.kind == "Deployment":
            return revision(pod) == self.from_revision
        return revision(pod) != self.revision


@dataclass(eq=False)
class Upgrade:
    kube: KubeClient
    namespace: str
    drains: DrainBatcher
    nodes: Callable[[], Mapping[str, FleetNode]]
    order: Callable[[], Iterable[str]]
    pods: Callable[[], Iterable[Pod]]
    node_of: Callable[[Pod], str]
    emit: Callable[[Pod, str, str], Awaitable[None]] | None = (
        None  # (worker pod, reason, message): an Event on it
    )
    plan: UpgradePlan | None = field(default=None, init=False)
    # drains asked for and not yet seen in the snapshot
    requested: set[str] = field(default_factory=set, init=False)
    deployment: DeploymentRoll = field(init=False)
    # self.plan is the ConfigMap's (read, or written by us, since forget())
    _loaded: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.deployment = DeploymentRoll(self.kube, self.namespace)

    async def load(self) -> UpgradePlan | None:
        self.plan = UpgradePlan.from_data(await self.kube.get_config_map(self.namespace, CONFIG_MAP) or {})
        self._loaded = True
        return self.plan

    async def save(self, plan: UpgradePlan) -> None:
        await self.kube.put_config_map(self.namespace, CONFIG_MAP, plan.data())
        self.plan = plan
        self._loaded = True

    async def current(self) -> UpgradePlan | None:
        """The plan, read only when what is held may be stale (see forget)."""
        return self.plan if self._loaded else await self.load()

    def forget(self) -> None:
        """The plan held may be stale (this replica has just become the leader, and another may have
        written meanwhile): the next step reads it again. Only the leader writes the plan, so while it
        leads, what it read or wrote last is the ConfigMap: no read per cycle."""
        self._loaded = False

    async def start(
        self,
        revision_: str,
        budget: str,
        *,
        controller: Version,
        slurmds: Mapping[str, Version],
        target: Version | None,
        deployment: str = "",
        slurmdbd: Version | None = None,
    ) -> UpgradePlan:
        workers = list(self.pods())
        parse_budget(budget, len(workers))  # refused before anything is written
        why = skew_error(controller, slurmds, target, slurmdbd)
        if why is not None:
            raise UpgradeError(409, f"version skew: {why}")
        current = await self.load()
        plan = UpgradePlan(revision_, budget, False, str(target) if target else "", time.time())
        if deployment:
            ours = current is not None and current.workload == deployment
            if current is not None and not ours and self._remaining(current):
                raise UpgradeError(409, f"an upgrade to {current.revision} is under way: let it finish first")
            try:
                begun = await self.deployment.begin(deployment, workers)
            except Refused as exc:
                raise UpgradeError(exc.status, exc.message) from None
            if ours and current is not None and current.from_revision == begun.from_revision:
                plan = current  # started again: the same roll goes on
            else:
                plan = UpgradePlan(
                    f"{deployment}.{begun.from_revision}"[:63].rstrip("._-"),
                    budget,
                    False,
                    plan.slurm_version,
                    plan.started_at,
                    "Deployment",
                    deployment,
                    begun.from_revision,
                    begun.template,
                    begun.restore,
                )
        elif current is not None and current.revision != revision_ and self._remaining(current):
            raise UpgradeError(409, f"an upgrade to {current.revision} is under way: let it finish first")
        await self.save(plan)
        log.info("upgrade_started", revision=revision_, budget=budget, workers=len(workers))
        return plan

    async def set_paused(self, paused: bool) -> UpgradePlan:
        plan = await self.load()
        if plan is None:
            raise UpgradeError(404, "no upgrade has been started")
        plan = replace(plan, paused=paused)
        await self.save(plan)
        return plan

    def _remaining(self, plan: UpgradePlan) -> list[Pod]:
        return [p for p in self.pods() if plan.old(p)]

    @staticmethod
    def _ours(node: FleetNode | None, plan: UpgradePlan) -> bool:
        # the reason alone is not enough: Slurm may keep the text after the drain is cleared
        return node is not None and node.reason == plan.reason and (node.drain or node.state == "DOWN")

    def report(self) -> dict[str, Any]:
        plan = self.plan
        if plan is None:
            return {"upgrade": None}
        pods, nodes = list(self.pods()), self.nodes()
        old = [p for p in pods if plan.old(p)]
        per_node: dict[str, str] = {}
        for p in pods:
            name, node = self.node_of(p), nodes.get(self.node_of(p))
            if node is None and not plan.old(p):
                continue  # a new pod not yet on a Slurm node (pending): its node is reported
            if not plan.old(p):
                per_node[name] = "returning" if self._ours(node, plan) else "upgraded"
            elif p.deleting:
                per_node[name] = "replacing"
            elif self._ours(node, plan):
                per_node[name] = (
                    f"waiting for jobs {', '.join(map(str, node.jobs))}" if node and node.busy else "drained"
                )
            else:
                per_node[name] = "queued"
        out = len(self.out_of_service(plan))
        return {
            "upgrade": {
                **asdict(plan),
                "budget_workers": parse_budget(plan.budget, len(pods)) if pods else 0,
                "out_of_service": out,
                "workers": len(pods),
                "upgraded": len(pods) - len(old),
                "complete": not old and out == 0,
                "waiting_for": (self.deployment.waiting or None) if plan.kind == "Deployment" else None,
                "nodes": dict(sorted(per_node.items())),
            }
        }

    def out_of_service(self, plan: UpgradePlan) -> set[str]:
        """The workers this upgrade holds: drained with its reason (from the drain until the undrain
        after the new pod is back, whatever happened to the pod meanwhile), asked to be, or deleting."""
        nodes, pods = self.nodes(), list(self.pods())
        held = {n for n, v in nodes.items() if self._ours(v, plan)}
        held |= {self.node_of(p) for p in pods if p.deleting}
        self._settle(plan, nodes, pods)
        return held | self.requested

    def _settle(self, plan: UpgradePlan, nodes: Mapping[str, FleetNode], pods: list[Pod]) -> None:
        """Forget the drains asked for that are settled: seen (ours, or refused for someone's drain),
        or overtaken by the pod itself (deleting, or back on the new revision). The last rule matters
        when a cycle never saw the drain: paused meanwhile, the worker could be drained, replaced and
        undrained unseen, and would hold a place in the budget for ever."""
        overtaken = {self.node_of(p) for p in pods if p.deleting or not plan.old(p)}
        self.requested = {
            n for n in self.requested if n in nodes and not nodes[n].drain and n not in overtaken
        }

    async def step(self) -> None:
        """One cycle (leader only): undrain the returned, delete the empty, drain the next in turn."""
        plan = await self.current()
        if plan is None:
            return
        pods, nodes = list(self.pods()), self.nodes()
        self._settle(plan, nodes, pods)  # every cycle, paused or not
        empty: list[Pod] = []  # old, drained for this upgrade, nothing running: to be replaced
        for p in pods:
            name = self.node_of(p)
            node = nodes.get(name)
            if p.deleting or not self._ours(node, plan):
                continue
            assert node is not None
            if not plan.old(p):
                if node.registered and node.state not in {"DOWN", "FUTURE"}:
                    self.drains.submit(name, "undrain", plan.reason)  # back, on the new revision
            elif not node.busy and plan.kind == "Deployment":
                empty.append(p)  # the ReplicaSet deletes it, once handed over
            elif not node.busy and await self.kube.delete_pod(p.namespace, p.name, uid=p.uid):
                log.info("upgrade_pod_deleted", pod=p.name, node=name, revision=plan.revision)
                if self.emit is not None:  # once: a second delete of the same pod finds it gone
                    await self.emit(
                        p, EventReason.UPGRADE_REPLACING, f"empty: pod deleted for revision {plan.revision}"
                    )
        if plan.kind == "Deployment":
            await self.deployment.step(
                plan.workload, plan.from_revision, plan.template, plan.restore, pods, empty
            )
            if not self.deployment.template_changed:
                return  # nothing to roll to yet: no worker is drained for nothing
        if plan.paused:
            return
        out = self.out_of_service(plan)
        budget = parse_budget(plan.budget, len(pods))
        rank = {n: i for i, n in enumerate(self.order())}
        queued = [
            p
            for p in pods
            if not p.deleting
            and plan.old(p)
            and self.node_of(p) not in out
            and (node := nodes.get(self.node_of(p))) is not None
            and not node.drain  # an admin's drain is left alone: that worker waits for them
        ]
        queued.sort(key=lambda p: (rank.get(self.node_of(p), len(rank)), self.node_of(p)))
        for p in queued[: max(0, budget - len(out))]:
            name = self.node_of(p)
            log.info("upgrade_drain", node=name, revision=plan.revision)
            self.requested.add(name)
            self.drains.submit(name, "drain", plan.reason)
            if self.emit is not None:
                await self.emit(
                    p, EventReason.UPGRADE_DRAINING, f"its turn in the upgrade to {plan.revision}: draining"
                )
