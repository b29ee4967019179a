"""Busy pods protected: a worker pod whose Slurm node runs a job carries `slurm-sidecars.io/busy=true`,
so a PodDisruptionBudget with `maxUnavailable: 0` on that label refuses its eviction (a `kubectl
drain`, a cluster autoscaler) while the job runs.

The label is set at the first pass that sees the node busy, and removed only once the node has been
idle for `release_seconds`: a node running one short job after another keeps its label instead of
flipping it (and the API server's watchers) with every job. Written only on change, read back from
the watched pods (never re-read per pass); sets go before removals, all under one rate limit.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field

import structlog

from sidecars.controlplane.reconcile.deps import WriterDeps
from sidecars.controlplane.reconcile.pacing import TokenBucket
from sidecars.controlplane.reconcile.round import Outcome, View, unready
from sidecars.controlplane.settings import BusySettings
from sidecars.kube import Pod
from sidecars.protocol import kube_names

log = structlog.get_logger(__name__)

LABEL = kube_names.BUSY_LABEL


def labelled(pod: Pod) -> bool:
    return pod.labels.get(LABEL) == "true"


@dataclass(eq=False)
class BusyLabeler:
    name = "busy_label"

    deps: WriterDeps
    settings: BusySettings = field(default_factory=BusySettings)
    _: KW_ONLY
    burst_seconds: float = 5.0
    _bucket: TokenBucket = field(init=False)
    # pod uid -> when its labelled node was first seen idle
    _idle_since: dict[str, float] = field(default_factory=dict, init=False)
    # pod uid -> (what we wrote, the pod's resourceVersion before): until the watched pod moves
    # past that version, the write is in flight and the cache's labels are not yet the truth
    _sent: dict[str, tuple[bool, str]] = field(default_factory=dict, init=False)
    writes: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        # a burst of `burst_seconds`' worth: passes come every --interval-seconds (4 s), and a bucket
        # holding one second's tokens would cap the rate at qps / interval
        qps = self.settings.label_qps
        self._bucket = TokenBucket(qps, self.deps.clock, capacity=qps * self.burst_seconds)

    def _have(self, pod: Pod) -> bool:
        sent = self._sent.get(pod.uid)
        if sent is not None and sent[1] == pod.resource_version:
            return sent[0]
        return labelled(pod)

    async def reconcile(self, view: View) -> Outcome:
        """One pass after a refresh: label the newly busy, unlabel the long idle."""
        if (skip := unready(view)) is not None:
            return skip
        pods, snap = view.pods, view.snapshot
        now = self.deps.clock()
        sets: list[Pod] = []
        removals: list[Pod] = []
        live: set[str] = set()
        for pod in pods:
            if pod.deleting:
                continue
            live.add(pod.uid)
            node = snap.nodes.get(self.deps.node_of(pod))
            busy = node is not None and node.busy
            have = self._have(pod)
            if busy:
                self._idle_since.pop(pod.uid, None)
                if not have:
                    sets.append(pod)
            elif have:
                since = self._idle_since.setdefault(pod.uid, now)
                if now - since >= self.settings.release_seconds:
                    removals.append(pod)
            else:
                self._idle_since.pop(pod.uid, None)
        self._idle_since = {u: t for u, t in self._idle_since.items() if u in live}
        self._sent = {u: s for u, s in self._sent.items() if u in live}
        made = 0
        due = [(p, True) for p in sorted(sets, key=lambda p: p.name)]
        due += [(p, False) for p in sorted(removals, key=lambda p: p.name)]
        for pod, busy in due:
            if not self._bucket.take():
                log.info("busy_labels_deferred", left=len(due) - made)
                break  # the rest on the next pass
            try:
                await self.deps.kube.label_pod(pod.namespace, pod.name, {LABEL: "true" if busy else None})
            except Exception as exc:  # one pod's failure (gone, forbidden) must not stop the rest
                log.warning("busy_label_failed", pod=pod.name, error=str(exc))
                continue
            self._sent[pod.uid] = (busy, pod.resource_version)
            if not busy:
                self._idle_since.pop(pod.uid, None)
            made += 1
        self.writes += made
        return Outcome(made)
