"""The opt-in policy for drains nobody owns (`--unowned-drain-policy`, off by default): a worker's
node that Slurm drained or downed itself (a prolog, an epilog, a kill that failed, a registration,
not responding...) and that has stayed so for `--unowned-settle-seconds` is either given back or
recycled, after a look at its health:

- healthy (its pod Ready, which is the agent's own readiness; its slurmd registered and answering;
  no job on it): resumed in Slurm, with a `SlurmDrainUnownedResumed` Event saying why;
- not healthy: its pod is handed to the recycler (capped, backed off, suspended on systemic faults),
  as an agent's report of an unregistered slurmd would be.

At most max(1, `--recycle-fraction` x workers) nodes are resumed per `--recycle-window-seconds`, the
recycler's own cap. An `unknown` reason (an admin's, another tool's) is never touched, nor is a node
with no worker pod. Just before a resume the node is read again: a reason that changed since (an
admin drained it anew) is left alone.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import structlog

from sidecars.controlplane.fleet import unowned
from sidecars.controlplane.fleet.snapshot import FleetNode
from sidecars.controlplane.reconcile.deps import WriterDeps
from sidecars.controlplane.reconcile.recycle import Recycler
from sidecars.controlplane.reconcile.round import Outcome, View, unready
from sidecars.controlplane.settings import UnownedSettings
from sidecars.kube import Pod
from sidecars.protocol.events import EventReason
from sidecars.slurm import SlurmError
from sidecars.slurm.reasons import Cause

log = structlog.get_logger(__name__)

RESUMED = EventReason.SLURM_DRAIN_UNOWNED_RESUMED


def healthy(node: FleetNode, pod: Pod) -> str | None:
    """Why the node cannot be given back as it is, or None when it can."""
    if not pod.ready:
        return f"pod {pod.name} is not Ready (its agent's checks fail)"
    if not node.registered or "NOT_RESPONDING" in node.flags:
        return f"slurmd on {node.name} is not registered or not answering"
    if node.jobs or node.busy:
        return f"work still on {node.name}: {', '.join(map(str, node.jobs)) or 'completing'}"
    return None


@dataclass(eq=False)
class UnownedPolicy:
    name = "unowned_policy"

    deps: WriterDeps
    recycler: Recycler
    settings: UnownedSettings
    # node -> (drain, first seen)
    _seen: dict[str, tuple[tuple[str, int | None], float]] = field(default_factory=dict, init=False)
    _resumed: deque[float] = field(default_factory=deque, init=False)
    resumed: int = field(default=0, init=False)
    recycled: int = field(default=0, init=False)

    async def reconcile(self, view: View) -> Outcome:
        if (skip := unready(view)) is not None:
            return skip
        if not view.snapshot.reachable:
            return Outcome(skipped="slurmctld unreachable")
        now = self.deps.clock()
        pods = {self.deps.node_of(p): p for p in view.pods if not p.deleting}
        seen: dict[str, tuple[tuple[str, int | None], float]] = {}
        due: list[tuple[unowned.Unowned, Pod]] = []
        for drain in unowned.scan(view.snapshot.nodes.values()):
            pod = pods.get(drain.node)
            if pod is None or drain.cause is Cause.UNKNOWN:
                continue  # not a worker of ours, or somebody's reason: never touched
            key = (drain.reason, drain.since)
            old = self._seen.get(drain.node)
            since = old[1] if old is not None and old[0] == key else now
            seen[drain.node] = (key, since)
            if now - since >= self.settings.settle_seconds:
                due.append((drain, pod))
        self._seen = seen
        while self._resumed and self._resumed[0] <= now - self.recycler.policy.window_seconds:
            self._resumed.popleft()
        cap = max(1, math.floor(self.recycler.policy.fraction * len(pods)))
        made = 0
        for drain, pod in sorted(due, key=lambda d: d[0].node):
            node = view.snapshot.nodes[drain.node]
            why_not = healthy(node, pod)
            if why_not is not None:
                detail = f"Slurm's drain '{drain.reason}' ({drain.cause.value}) and {why_not}"
                self.recycler.report(pod.namespace, pod.name, False, detail)
                self._seen.pop(drain.node, None)  # judged again once the pod is back
                self.recycled += 1
                log.warning("unowned_drain_recycle", node=drain.node, pod=pod.name, why=why_not)
                continue
            if len(self._resumed) >= cap:
                log.info("unowned_drain_capped", node=drain.node, cap=cap)
                break
            if await self._resume(drain, pod):
                self._resumed.append(now)
                self._seen.pop(drain.node, None)
                made += 1
        return Outcome(made)

    async def _resume(self, drain: unowned.Unowned, pod: Pod) -> bool:
        try:
            fresh = await self.deps.slurm.node(drain.node)
        except SlurmError as exc:
            log.warning("unowned_drain_read_failed", node=drain.node, error=exc.message)
            return False
        text = fresh.reason.text[: unowned.REASON_CHARS] if fresh and fresh.reason else ""
        if fresh is None or text != drain.reason:
            return False  # gone, or drained anew by someone since the snapshot: theirs now
        try:
            await self.deps.slurm.resume([drain.node])
        except SlurmError as exc:
            log.warning("unowned_drain_resume_failed", node=drain.node, error=exc.message)
            return False
        self.resumed += 1
        message = (
            f"resumed Slurm node {drain.node}: Slurm's own drain '{drain.reason}' ({drain.cause.value})"
            f" held it, and it is healthy now (pod Ready, slurmd registered and answering, no work on it)"
        )
        log.warning("unowned_drain_resumed", node=drain.node, reason=drain.reason, cause=drain.cause.value)
        try:
            await self.deps.emit(pod, RESUMED, message, "Normal")
        except Exception as exc:  # the resume is done; its report must not undo the pass
            log.warning("unowned_drain_event_failed", node=drain.node, error=str(exc))
        return True
