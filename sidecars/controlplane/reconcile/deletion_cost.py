"""The scale-in rank on worker pods, so that a scale-in removes first the pods whose work ends
soonest: `controller.kubernetes.io/pod-deletion-cost` on ReplicaSet-owned pods, and in Slinky mode
(pods owned by a slurm-operator NodeSet, or --slinky-mode=true) Slinky's own `pod-deletion-cost`
and `pod-deadline` instead, which its NodeSet controller reads (see `slinky_rank`). A pod is patched
only when its rank bucket (buckets double in width, see `ranking.bucket`) or, in Slinky mode, its
deadline changes, and patches are rate-limited; the rest wait for the next cycle."""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from sidecars.controlplane.fleet import ranking
from sidecars.controlplane.fleet.slinky import slinky_pod
from sidecars.controlplane.reconcile import slinky_rank
from sidecars.controlplane.reconcile.deps import WriterDeps
from sidecars.controlplane.reconcile.pacing import TokenBucket
from sidecars.controlplane.reconcile.round import Outcome, View, unready
from sidecars.kube import Pod

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
        deps: WriterDeps,
        *,
        qps: float = 5.0,
        clock: Callable[[], float] = time.time,
        held: Callable[[Pod], int | None] | None = None,
    ) -> None:
        self._held = held  # a cost someone else holds a pod at (an upgrade's handover): left alone
        self.deps = deps  # slinky_mode None: each pod ranked the way its owner reads
        self._bucket = TokenBucket(qps, clock)  # one injected clock for the rate and the ranking
        self._clock = clock
        self.slinky = deps.slinky_mode is True  # whether the last pass ranked any pod the Slinky way
        # pod uid -> what we wrote: a cost (Kubernetes') or a (cost, deadline) mark (Slinky's)
        self._written: dict[str, int | slinky_rank.Mark] = {}

    async def reconcile(self, view: View) -> Outcome:
        """Patch the pods whose rank changed, lowest cost first, within the rate."""
        if (skip := unready(view)) is not None:
            return skip
        pods, snapshot = view.pods, view.snapshot
        now = self._clock()
        wanted: list[tuple[int | slinky_rank.Mark, Pod]] = []
        live: set[str] = set()
        slinky = self.deps.slinky_mode is True
        for pod in pods:
            how = None if pod.deleting else slinky_pod(pod, self.deps.slinky_mode)
            if how is None:
                continue
            live.add(pod.uid)
            slinky = slinky or how
            if self._held is not None and self._held(pod) is not None:
                continue
            node = snapshot.nodes.get(self.deps.node_of(pod))
            if node is None:
                continue
            cost = ranking.bucket(node.busy_until, now)
            if how:
                mark: slinky_rank.Mark = (cost, node.busy_until)
                had = self._written.get(pod.uid)
                have = had if isinstance(had, tuple) else slinky_rank.read(pod.annotations)
                if not slinky_rank.same(have, mark):
                    wanted.append((mark, pod))
            elif self._written.get(pod.uid, _current(pod)) != cost:
                wanted.append((cost, pod))
        self._written = {uid: w for uid, w in self._written.items() if uid in live}
        self._note_mode(slinky)
        made = 0
        for want, pod in sorted(wanted, key=lambda wp: (_cost(wp[0]), wp[1].name)):
            if not self._bucket.take():
                self.deps.metrics.deletion_cost_patches.labels("deferred").inc(len(wanted) - made)
                break
            patch = slinky_rank.patch(want) if isinstance(want, tuple) else {ANNOTATION: str(want)}
            try:
                await self.deps.kube.annotate_pod(pod.namespace, pod.name, patch)
            except Exception as exc:  # one pod's failure (gone, forbidden) must not stop the rest
                self.deps.metrics.deletion_cost_patches.labels("error").inc()
                log.warning("deletion_cost_patch_failed", pod=pod.name, error=str(exc))
                continue
            self._written[pod.uid] = want
            self.deps.metrics.deletion_cost_patches.labels("ok").inc()
            made += 1
        return Outcome(made)

    def _note_mode(self, slinky: bool) -> None:
        if slinky != self.slinky:
            log.info("slinky_mode", on=slinky, forced=self.deps.slinky_mode is not None)
        self.slinky = slinky
        self.deps.metrics.slinky_mode.set(1 if slinky else 0)


def _cost(want: int | slinky_rank.Mark) -> int:
    return (want[0] or 0) if isinstance(want, tuple) else want
