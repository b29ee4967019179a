"""`controller.kubernetes.io/pod-deletion-cost` on ReplicaSet-owned worker pods, so that a scale-in
removes first the pods whose work ends soonest. A pod is patched only when its rank bucket changes
(buckets double in width, see `ranking.bucket`), and patches are rate-limited; the rest wait for the
next cycle."""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from sidecars.controlplane.fleet import ranking
from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.controlplane.reconcile.pacing import TokenBucket
from sidecars.controlplane.reconcile.round import Outcome, View, unready
from sidecars.kube import KubeClient, Pod

log = structlog.get_logger(__name__)

ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"


def _current(pod: Pod) -> int | None:
    value = pod.annotations.get(ANNOTATION)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class DeletionCostWriter:
    name = "deletion_cost"

    def __init__(
        self,
        kube: KubeClient,
        metrics: ControlPlaneMetrics,
        *,
        qps: float = 5.0,
        node_of: Callable[[Pod], str],
        clock: Callable[[], float] = time.time,
        held: Callable[[Pod], int | None] | None = None,
    ) -> None:
        self._held = held  # a cost someone else holds a pod at (an upgrade's handover): left alone
        self._kube = kube
        self._metrics = metrics
        self._bucket = TokenBucket(qps, clock)  # one injected clock for the rate and the ranking
        self._node_of = node_of
        self._clock = clock
        self._written: dict[str, int] = {}  # pod uid -> cost we wrote

    async def reconcile(self, view: View) -> Outcome:
        """Patch the pods whose bucket changed, lowest cost first, within the rate."""
        if (skip := unready(view)) is not None:
            return skip
        pods, snapshot = view.pods, view.snapshot
        now = self._clock()
        wanted: list[tuple[int, Pod]] = []
        live: set[str] = set()
        for pod in pods:
            if pod.owner_kind != "ReplicaSet" or pod.deleting:
                continue
            live.add(pod.uid)
            if self._held is not None and self._held(pod) is not None:
                continue
            node = snapshot.nodes.get(self._node_of(pod))
            if node is None:
                continue
            cost = ranking.bucket(node.busy_until, now)
            have = self._written.get(pod.uid, _current(pod))
            if have != cost:
                wanted.append((cost, pod))
        self._written = {uid: c for uid, c in self._written.items() if uid in live}
        made = 0
        for cost, pod in sorted(wanted, key=lambda cp: (cp[0], cp[1].name)):
            if not self._bucket.take():
                self._metrics.deletion_cost_patches.labels("deferred").inc(len(wanted) - made)
                break
            try:
                await self._kube.annotate_pod(pod.namespace, pod.name, {ANNOTATION: str(cost)})
            except Exception as exc:  # one pod's failure (gone, forbidden) must not stop the rest
                self._metrics.deletion_cost_patches.labels("error").inc()
                log.warning("deletion_cost_patch_failed", pod=pod.name, error=str(exc))
                continue
            self._written[pod.uid] = cost
            self._metrics.deletion_cost_patches.labels("ok").inc()
            made += 1
        return Outcome(made)
