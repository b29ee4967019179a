"""Cordon -> drain, uncordon -> undrain: a Kubernetes Node that is unschedulable (or carries a
configured taint) drains the Slurm nodes of the worker pods on it, with a reason naming the Node.

Only our cordon reasons are ever undone (the DrainBatcher undrains only on an exact reason match,
read from Slurm just before the write); a drain of anyone else's stays. A drain of ours that an
admin removed while the cordon holds is written again (SUNK's rule: the cordon is the intent), and
an Event on the worker pod says so, also when the drain was a previous leader's (the pod's
SlurmNodeDrained condition still carries our reason). Decided after each refresh from the snapshot
and the watched Nodes: no Kubernetes call per interval, one Event per re-applied drain.

The Event is owed by what the drain batcher wrote, whatever order the passes and the batcher see
the change in: a drain written on a node this process had seen drained with our reason before the
read that write rested on is a re-apply (also when the drain asked was queued before the admin's
undrain, and no pass ever saw the node undrained), as is one asked by a pass that saw ours lifted.
An owed Event stays owed until the API server took it.

A pod Slinky's operator runs (`slinky_pod`, by --slinky-mode) is left to it: the operator drains a
cordoned Node's NodeSet pods itself (`slurm-operator: ` reasons), so a second drain of ours would only
race it. A drain of ours left from before is still lifted once its Node is uncordoned.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import structlog

from sidecars.controlplane.fleet.drains import Written
from sidecars.controlplane.fleet.slinky import slinky_pod
from sidecars.controlplane.reconcile.deps import WriterDeps
from sidecars.controlplane.reconcile.round import Outcome, View, unready
from sidecars.controlplane.settings import CordonSettings
from sidecars.kube import Pod
from sidecars.protocol import drains, kube_names
from sidecars.protocol.events import EventReason

log = structlog.get_logger(__name__)

_PREFIX, _SUFFIX = drains.CORDON
COMPONENT = "slurm-sidecars-control-plane"


def cordon_reason(kube_node: str) -> str:
    return f"{_PREFIX}{kube_node}{_SUFFIX}"


def is_cordon_reason(reason: str | None) -> bool:
    return reason is not None and reason.startswith(_PREFIX) and reason.endswith(_SUFFIX)


@dataclass(frozen=True, slots=True)
class _Wanted:
    kube_node: str
    pod: Pod


@dataclass(eq=False)
class CordonSync:
    name = "cordons"

    deps: WriterDeps
    settings: CordonSettings = field(default_factory=CordonSettings)
    # Slurm node -> Kubernetes node, seen drained with our reason
    held: dict[str, str] = field(default_factory=dict, init=False)
    # Slurm node -> when a pass first saw our drain in place (monotonic; dropped once another
    # reason is seen there): a drain written after a read that began later re-applies it
    _ours_seen: dict[str, float] = field(default_factory=dict, init=False)
    # re-drains asked, reported once written
    _redraining: dict[str, _Wanted] = field(default_factory=dict, init=False)
    _wanted: dict[str, _Wanted] = field(default_factory=dict, init=False)  # as the last pass saw them
    # Events owed, kept until the API server takes them
    _owed: dict[str, _Wanted] = field(default_factory=dict, init=False)
    # Slurm nodes a cycle has seen cordoned (pruned to the fleet)
    _looked: set[str] = field(default_factory=set, init=False)

    @property
    def ready(self) -> bool:
        return self.deps.nodes.synced.is_set()

    def wanted(self, pods: Iterable[Pod]) -> dict[str, _Wanted]:
        """The Slurm nodes that a cordon asks to drain, with the Node and the pod that put them there."""
        out: dict[str, _Wanted] = {}
        taint_keys = frozenset(self.settings.taints)
        for pod in pods:
            host = self.deps.nodes.nodes.get(pod.node_name) if pod.node_name else None
            if slinky_pod(pod, self.deps.slinky_mode) is True:
                continue  # the operator's cordon sync drains it
            if host is not None and not pod.deleting and host.cordoned(taint_keys):
                out[self.deps.node_of(pod)] = _Wanted(host.name, pod)
        return out

    def written(self, done: Written) -> None:
        """The drain batcher wrote these: the drains among them that re-apply ours get their Event
        (asked as a re-drain, or written over a drain of ours seen in place before the batch's read)."""
        for name, req in done.requests.items():
            if req.action != "drain":
                continue
            want = self._redraining.pop(name, None)
            if want is None and (last := self._wanted.get(name)) is not None:
                seen = self._ours_seen.get(name)
                if req.reason == cordon_reason(last.kube_node) and seen is not None and seen < done.read_at:
                    want = last
            if want is not None:
                self._owed[name] = want

    async def reconcile(self, view: View) -> Outcome:
        """One pass (leader only, after a refresh): ask the drains and undrains the cordons imply
        (the drain batcher writes them: the outcome counts the requests asked)."""
        if (skip := unready(view, self.ready)) is not None:
            return skip
        pods, snap = view.pods, view.snapshot
        await self._report()
        asked = 0
        wanted = self.wanted(pods)
        pending = self.deps.drains.pending
        now = self.deps.clock()
        for name, want in sorted(wanted.items()):
            node = snap.nodes.get(name)
            if node is None:
                continue
            reason = cordon_reason(want.kube_node)
            if node.drain:
                if node.reason == reason:
                    self.held[name] = want.kube_node
                    self._ours_seen.setdefault(name, now)
                    # a re-drain asked stays asked until the batcher says it wrote it: seen in
                    # place now, it may be this very write (told after the scontrol returns)
                else:
                    self._redraining.pop(name, None)  # someone's drain holds: nothing to redo
                    self._ours_seen.pop(name, None)
                continue
            # the bookkeeping before the queue's check: a drain already queued (asked before the
            # admin's undrain, or requeued) re-applies ours just the same when it is written
            if self._was_ours(name, want, reason):
                self._redraining[name] = want  # ours was removed while the cordon holds
            if name in pending:
                continue
            self.deps.drains.submit(name, "drain", reason)
            asked += 1
        self._looked = (self._looked | wanted.keys()) & snap.nodes.keys()
        self._wanted = wanted
        self.held = {n: k for n, k in self.held.items() if n in wanted}
        self._ours_seen = {n: t for n, t in self._ours_seen.items() if n in wanted}
        self._redraining = {n: w for n, w in self._redraining.items() if n in wanted}
        for name, node in snap.nodes.items():
            if name not in wanted and name not in pending and is_cordon_reason(node.reason):
                assert node.reason is not None
                self.deps.drains.submit(name, "undrain", node.reason)  # only an exact match is undone
                asked += 1
        return Outcome(asked)

    def _was_ours(self, name: str, want: _Wanted, reason: str) -> bool:
        """Whether the drain now missing was ours: seen by this process, or, on the first look of a
        new leader, still on the pod (its SlurmNodeDrained condition, written by the last leader)."""
        if self.held.get(name) == want.kube_node:
            return True
        return (
            name not in self._looked and (kube_names.NODE_DRAINED[0], "True", reason) in want.pod.conditions
        )

    async def _report(self) -> None:
        for name, want in list(self._owed.items()):
            message = (
                f"Slurm node {name} drained again: its drain was removed while Kubernetes node "
                f"{want.kube_node} is still cordoned (uncordon the node to return it to Slurm)"
            )
            log.warning("cordon_drain_reapplied", node=name, kube_node=want.kube_node, pod=want.pod.name)
            involved = {
                "kind": "Pod",
                "name": want.pod.name,
                "namespace": want.pod.namespace,
                "uid": want.pod.uid,
            }
            try:
                await self.deps.kube.create_event(
                    want.pod.namespace,
                    involved,
                    EventReason.SLURM_DRAIN_REAPPLIED,
                    message,
                    type="Warning",
                    component=COMPONENT,
                )
            except Exception as exc:  # reporting must never stop the sync: owed still, told next pass
                log.warning("kube_event_failed", reason=EventReason.SLURM_DRAIN_REAPPLIED, error=str(exc))
                continue
            if self._owed.get(name) is want:  # not owed again meanwhile (a newer re-apply)
                del self._owed[name]
