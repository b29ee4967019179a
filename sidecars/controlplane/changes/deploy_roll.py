"""A paced roll of a Deployment's worker pods: Kubernetes deletes, the control plane says which
and when.

Why not let the Deployment roll by itself: its controller counts a terminating pod as gone (the
ReplicaSet's status leaves it out), so once the replacement is available it deletes the next old
pod while the first one's preStop drain still waits for a job; `maxUnavailable` does not bound the
pods that are draining. Why not delete the pods ourselves: the old ReplicaSet would recreate them
from the old template. What holds:

- `upgrade start --deployment NAME` pauses the Deployment (`spec.paused`: its controller then
  neither starts the new ReplicaSet nor moves pods, whatever the template) with `maxSurge: 0`, and
  remembers its template's digest and its pods' `pod-template-hash`. The template is changed after
  (`kubectl set image ...`); until it is, nothing is drained.
- The upgrade drains old workers in turn under its budget, as for a StatefulSet. A worker drained
  and empty is handed over: its `pod-deletion-cost` is set to the lowest there is (the ReplicaSet
  removes the cheapest pods first, after any not ready), then the Deployment is unpaused with
  `maxUnavailable` = the pods unavailable now + those handed over, so that its controller scales
  the old ReplicaSet down by exactly that many (it picks ours), and the new one up by as many.
- As soon as the ReplicaSets add up to the Deployment's replicas again it is paused: before any
  new pod can become available, which is the only thing that would let the controller take more.
  (Not while they do not add up: a paused Deployment is scaled proportionally, and the largest
  ReplicaSet, the old one, would get the difference back.) Set `minReadySeconds` to make that
  window wider than any doubt.
- A handover waits while an old pod that is not ours is not Ready (the ReplicaSet would delete it
  first, whatever its cost). The plan is in the upgrade's ConfigMap and the Deployment's own state:
  a control plane restarted mid-handover pauses the Deployment once the ReplicaSets add up.
- Once no old pod is left the Deployment's own strategy is put back and it is unpaused.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass, field

import structlog

from sidecars.kube import Deployment, KubeClient, Pod
from sidecars.protocol import kube_names

log = structlog.get_logger(__name__)

ANNOTATION = kube_names.UPGRADE_ANNOTATION  # on a Deployment this upgrade paused: the old pods' hash
COST = "controller.kubernetes.io/pod-deletion-cost"
FIRST = -2147483648  # pod-deletion-cost is an int32: the lowest goes first


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Begun:
    from_revision: str
    template: str
    restore: str  # the strategy to put back at the end (JSON)


def refusal(d: Deployment | None, name: str, hashes: set[str]) -> Refused | None:
    """What cannot be paced safely, before anything is written."""
    if d is None:
        return Refused(404, f"no Deployment {name} in the namespace")
    if d.strategy != "RollingUpdate":
        return Refused(409, f"Deployment {name} has strategy {d.strategy}: it replaces every pod at once")
    ours = d.annotations.get(ANNOTATION)
    if d.paused and ours is None:
        return Refused(409, f"Deployment {name} is paused by someone else: resume it (or let them) first")
    if ours is None and (d.observed_generation < d.generation or d.updated < d.replicas or len(hashes) > 1):
        return Refused(
            409,
            f"Deployment {name} is already rolling ({len(hashes)} pod templates, {d.updated}/"
            f"{d.replicas} updated): let it finish (kubectl rollout status) before a paced roll",
        )
    if not hashes:
        return Refused(409, f"Deployment {name} has no worker pods to roll")
    return None


@dataclass(eq=False)
class DeploymentRoll:
    kube: KubeClient
    namespace: str
    _: KW_ONLY
    handover_seconds: float = 15.0
    poll: float = 0.1
    template_changed: bool = field(default=False, init=False)
    waiting: str = field(default="", init=False)  # why no handover this cycle, for the report
    # uids handed over: their deletion cost stays the lowest
    _first: set[str] = field(default_factory=set, init=False)
    _from: str = field(default="", init=False)  # the old pods' pod-template-hash
    # (name, old hash) given back: no more reads
    _finished: tuple[str, str] | None = field(default=None, init=False)

    def cost(self, pod: Pod) -> int | None:
        """The deletion cost this roll holds a pod at (the scale-in ranking leaves it alone)."""
        return FIRST if pod.uid in self._first else None

    async def begin(self, name: str, pods: Iterable[Pod]) -> Begun:
        hashes = {p.labels.get("pod-template-hash", "") for p in pods if not p.deleting} - {""}
        d = await self.kube.get_deployment(self.namespace, name)
        why = refusal(d, name, hashes)
        if why is not None:
            raise why
        assert d is not None
        from_revision = d.annotations.get(ANNOTATION) or next(iter(hashes))
        restore = json.dumps({"maxSurge": d.max_surge, "maxUnavailable": d.max_unavailable})
        if d.annotations.get(ANNOTATION) is None:  # a start again of our own pause keeps the first
            d = await self.kube.patch_deployment(
                self.namespace,
                name,
                {
                    "metadata": {"annotations": {ANNOTATION: from_revision}},
                    "spec": {
                        "paused": True,
                        "strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                    },
                },
            )
        log.info("deployment_paused_for_upgrade", deployment=name, pods_from=from_revision)
        return Begun(from_revision, d.template, restore)

    async def _replica_sets(self, d: Deployment) -> tuple[int, int]:
        """(replicas of the old ReplicaSet, replicas of all of them) as their controller keeps them."""
        selector = ",".join(f"{k}={v}" for k, v in sorted(d.selector.items()))
        sets = [r for r in await self.kube.list_replica_sets(self.namespace, selector) if r.owner == d.name]
        return sum(r.replicas for r in sets if r.revision == self._from), sum(r.replicas for r in sets)

    async def _pause(self, d: Deployment) -> None:
        patch = {"spec": {"paused": True, "strategy": {"rollingUpdate": {"maxUnavailable": 1}}}}
        await self.kube.patch_deployment(self.namespace, d.name, patch)

    async def step(
        self, name: str, from_revision: str, template: str, restore: str, pods: list[Pod], ready: list[Pod]
    ) -> None:
        """One cycle: pause what must be paused, hand `ready` (drained, empty, old) over, finish."""
        self._from = from_revision
        if self._finished == (name, from_revision):
            return
        d = await self.kube.get_deployment(self.namespace, name)
        if d is None:
            self.waiting = f"no Deployment {name}"
            return
        self.template_changed = d.template != template
        if not self.template_changed:
            self.waiting = "the Deployment's new template (kubectl set image ...)"
            if not d.paused and ANNOTATION in d.annotations:
                await self._pause(d)
            return
        old_replicas, total = await self._replica_sets(d)
        old = [p for p in pods if p.labels.get("pod-template-hash") == from_revision]
        if not old and old_replicas == 0:
            self.waiting = ""
            self._first.clear()
            if d.paused or ANNOTATION in d.annotations:
                await self._finish(d, restore)
            self._finished = (name, from_revision)
            return
        if not d.paused:  # a handover left unfinished (a restart): pause once the sets add up
            if total == d.replicas:
                await self._pause(d)
            self.waiting = "the ReplicaSets to add up again"
            return
        handing = ready  # an unready one goes first anyway: ours, it may
        uids = {p.uid for p in handing}
        blocking = [p.name for p in old if not p.ready and not p.deleting and p.uid not in uids]
        if blocking:  # the ReplicaSet would delete an unready pod first, whatever its cost
            self.waiting = f"old pod {blocking[0]} to be Ready"
            return
        self.waiting = ""
        self._first = uids  # one no longer empty (an admin undrained it) gets its ranked cost back
        stale = [
            p.name
            for p in old
            if p.uid not in uids and not p.deleting and p.annotations.get(COST) == str(FIRST)
        ]
        if stale:  # it would tie with those handed over: wait for the scale-in ranking to rewrite it
            self.waiting = f"the deletion cost of {stale[0]} to be ranked again"
            return
        if not handing:
            return
        marked = False
        for p in handing:
            if p.annotations.get(COST) != str(FIRST):
                await self.kube.annotate_pod(p.namespace, p.name, {COST: str(FIRST)})
                marked = True
        if marked:
            return  # unpaused next cycle, once the pod cache shows the costs the ReplicaSet reads
        await self._hand_over(d, handing, pods, old_replicas)

    async def _hand_over(self, d: Deployment, handing: list[Pod], pods: list[Pod], old_replicas: int) -> None:
        available = sum(1 for p in pods if p.ready and not p.deleting)
        # the unready ones handed over are taken first (cleanupUnhealthyReplicas): counted once, in take
        unavailable = max(0, d.replicas - available - sum(1 for p in handing if not p.ready))
        take = len(handing)
        patch = {
            "spec": {
                "paused": False,
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 0, "maxUnavailable": unavailable + take},
                },
            }
        }
        await self.kube.patch_deployment(self.namespace, d.name, patch)
        log.info("deployment_handover", deployment=d.name, pods=[p.name for p in handing])
        deadline = time.monotonic() + self.handover_seconds
        total = -1
        while time.monotonic() < deadline:
            old_now, total = await self._replica_sets(d)
            if old_now <= old_replicas - take and total == d.replicas:
                break
            await asyncio.sleep(self.poll)  # the controller acts within milliseconds: poll its result
        if total == d.replicas:
            await self._pause(d)
        else:
            log.warning("deployment_handover_unfinished", deployment=d.name, replicas=total)

    async def _finish(self, d: Deployment, restore: str) -> None:
        try:
            strategy = json.loads(restore) if restore else {}
        except ValueError:
            strategy = {}
        patch = {
            "metadata": {"annotations": {ANNOTATION: None}},
            "spec": {"paused": False, "strategy": {"rollingUpdate": strategy} if strategy else {}},
        }
        await self.kube.patch_deployment(self.namespace, d.name, patch)
        log.info("deployment_upgrade_finished", deployment=d.name)
