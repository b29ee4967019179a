"""The writers that run after each refresh, behind one protocol, run in one place in a declared order.

Each writer decides from the same view (the worker pods that hold their Slurm node, and the
snapshot just read) and says what it did in the same shape. A writer that raises is logged and
counted, and the ones after it still run: a Kubernetes hiccup in one must not starve the others.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.controlplane.fleet.snapshot import FleetSnapshot
from sidecars.kube import Pod
from sidecars.protocol.events import Reason
from sidecars.runtime.events import EventType

log = structlog.get_logger(__name__)

# how a writer puts an Event on a worker pod (reason, message, type)
PodEmit = Callable[[Pod, Reason, str, EventType], Awaitable[None]]


@dataclass(frozen=True)
class View:
    """What every writer decides from."""

    pods: Sequence[Pod]  # the worker pods, one per Slurm node (claims resolved)
    snapshot: FleetSnapshot


@dataclass(frozen=True)
class Outcome:
    """What one writer did in one pass: its writes, or why it decided nothing."""

    writes: int = 0
    skipped: str = ""

    @property
    def result(self) -> str:
        return "skipped" if self.skipped else "ok"


NOT_LOADED = Outcome(skipped="no fleet snapshot read yet")
NOT_SYNCED = Outcome(skipped="its Kubernetes caches are not listed yet")


def unready(view: View, synced: bool = True) -> Outcome | None:
    """Why a writer cannot decide on this view (its caches not listed, no snapshot yet); None: it can."""
    if not synced:
        return NOT_SYNCED
    if not view.snapshot.loaded:
        return NOT_LOADED
    return None


class Reconciler(Protocol):
    """A writer run after each refresh, by the leader only."""

    @property
    def name(self) -> str: ...

    async def reconcile(self, view: View) -> Outcome: ...


class Round:
    """The writers, in the order given (the first is what keeps jobs from eviction), each guarded."""

    def __init__(self, writers: Sequence[Reconciler], metrics: ControlPlaneMetrics) -> None:
        self.writers = tuple(writers)
        names = [w.name for w in self.writers]
        if len(set(names)) != len(names):
            raise ValueError(f"two writers share a name: {names}")
        self._metrics = metrics

    def __getitem__(self, name: str) -> Reconciler:
        for writer in self.writers:
            if writer.name == name:
                return writer
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return any(w.name == name for w in self.writers)

    async def run(self, view: View) -> dict[str, Outcome | None]:
        """One pass of every writer; None for one that failed (logged and counted)."""
        done: dict[str, Outcome | None] = {}
        for writer in self.writers:
            try:
                outcome = await writer.reconcile(view)
            except Exception as exc:  # one writer's failure must not stop the ones after it
                log.warning("reconcile_failed", writer=writer.name, error=str(exc))
                self._metrics.reconcile_passes.labels(writer.name, "error").inc()
                done[writer.name] = None
                continue
            self._metrics.reconcile_passes.labels(writer.name, outcome.result).inc()
            done[writer.name] = outcome
        return done
