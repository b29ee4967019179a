"""One Warning Event for each drain nobody owns (fleet.unowned decides which), when it is first seen:
on the node's worker pod where it has one, else on the control plane's own object. Said once per
(node, reason, since): the same drain is not said again on each refresh or after a leader change
that kept this process, and a new drain of the same node (another reason, or set again) is. Paced
by `qps` (Events are writes to the API server): a fleet of node records that are all DOWN is said
over a few minutes, not in one burst."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field

from sidecars.controlplane.fleet import unowned
from sidecars.controlplane.reconcile.deps import WriterDeps
from sidecars.controlplane.reconcile.pacing import TokenBucket
from sidecars.controlplane.reconcile.round import Outcome, View, unready
from sidecars.protocol.events import EventReason
from sidecars.slurm.reasons import Cause

EVENT_REASON = EventReason.SLURM_DRAIN_UNOWNED


def message(found: unowned.Unowned) -> str:
    whose = (
        "nobody set it but Slurm"
        if found.cause is not Cause.UNKNOWN
        else "not set by slurm-sidecars or Slinky's operator"
    )
    return (
        f"Slurm node {found.node} is {found.state} for '{found.reason}' ({found.cause.value}; {whose}):"
        " it stays out of service until somebody resumes it"
    )


@dataclass(eq=False)
class UnownedDrainEvents:
    name = "unowned_events"

    deps: WriterDeps
    _: KW_ONLY
    qps: float = 5.0
    _bucket: TokenBucket = field(init=False)
    # node -> (reason, since) already said
    _said: dict[str, tuple[str, int | None]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._bucket = TokenBucket(self.qps, self.deps.clock)

    async def reconcile(self, view: View) -> Outcome:
        if (skip := unready(view)) is not None:
            return skip
        found = unowned.scan(view.snapshot.nodes.values())
        pods = {self.deps.node_of(p): p for p in view.pods if not p.deleting}
        said: dict[str, tuple[str, int | None]] = {}
        made = 0
        for drain in found:
            key = (drain.reason, drain.since)
            said[drain.node] = key
            if self._said.get(drain.node) == key:
                continue
            if not self._bucket.take():
                said.pop(drain.node)  # not said yet: on a later pass
                continue
            pod = pods.get(drain.node)
            if pod is not None:
                await self.deps.emit(pod, EVENT_REASON, message(drain), "Warning")
            else:
                await self.deps.events.emit(EVENT_REASON, message(drain), "Warning")
            self._said[drain.node] = key
            made += 1
        self._said = said  # a node back in service is forgotten: its next unowned drain is said again
        return Outcome(made)
