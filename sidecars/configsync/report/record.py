"""What config-sync says of each outcome, once and the same way everywhere: the history entry, the
metrics, the Kubernetes Event and the log line."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.fileset.stage import Applied, Restored
from sidecars.configsync.report.history import History
from sidecars.configsync.report.metrics import ConfigSyncMetrics
from sidecars.protocol.configsync import ConfigOutcome
from sidecars.protocol.events import EventReason
from sidecars.runtime.events import EventSink

log = structlog.get_logger(__name__)

# the Event of each way a set is refused (a held one's is its hold rule's: configsync/holds)
NOT_APPLIED_EVENTS = {
    ConfigOutcome.REJECTED: EventReason.CONFIG_REJECTED,
    ConfigOutcome.ROLLED_BACK: EventReason.CONFIG_ROLLED_BACK,
}


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Rejection:
    sha256: str
    reason: str
    at: str
    restart_required: bool = False
    jobs: tuple[int, ...] = ()  # held: the jobs it would end or requeue
    held_by: str | None = None  # the hold rule that holds it (configsync/holds), None: refused
    again: bool = False  # judged again at every pass: the state that holds it may change by itself


Phases = dict[str, int | None]  # where a change's time went, in ms (None: not reached)


def change_phases(
    seen: float, judged: float, swapped: float, dry_run: float | None, reconfigure: float | None
) -> Phases:
    """Where an applied change's time went, in ms, from its monotonic instants: validation (the dry
    run beside the rest; `dry_run` its seconds, None when none ran), the swap, `scontrol
    reconfigure` until it returned, the verification."""
    ended = time.monotonic()
    return {
        "validate_ms": round((judged - seen) * 1000),
        "dry_run_ms": None if dry_run is None else round(dry_run * 1000),
        "swap_ms": round((swapped - judged) * 1000),
        "reconfigure_ms": None if reconfigure is None else round(reconfigure * 1000),
        "verify_ms": round((ended - swapped - (reconfigure or 0.0)) * 1000),
        "total_ms": round((ended - seen) * 1000),
    }


class Recorder:
    def __init__(self, history: History, metrics: ConfigSyncMetrics, events: EventSink) -> None:
        self.history = history
        self.metrics = metrics
        self.events = events
        self.recent_phases: deque[Phases] = deque(maxlen=1000)  # of the latest applied changes (benchmarks)

    def gauges(self, pending: bool, rejected: Rejection | None, applied: Applied | None) -> None:
        """The metrics that say where config-sync stands now."""
        self.metrics.pending.set(1 if pending else 0)
        self.metrics.restart_required.set(1 if rejected and rejected.restart_required else 0)
        self.metrics.held_jobs.set(len(rejected.jobs) if rejected else 0)
        for rule in self.metrics.hold_rules:
            self.metrics.held.labels(rule=rule).set(1 if rejected and rejected.held_by == rule else 0)
        if applied:
            self.metrics.generation.set(applied.generation)

    async def applied(
        self,
        new: Applied,
        old: Applied | None,
        *,
        seen: float,
        reason: str | None,
        message: str,
        forced: bool = False,
        installed: bool = False,
        phases: Phases | None = None,
        outcome: ConfigOutcome = ConfigOutcome.APPLIED,
        event: EventReason = EventReason.CONFIG_APPLIED,
    ) -> None:
        """`new` is on disk and what slurmctld runs on (or will start on, when `installed`). With HA
        peers the outcome may be `staging` until every controller pod holds it (ha/rollout.py): it
        is counted as applied only then."""
        await self.history.record(
            outcome,
            new.files,
            old.files if old else None,
            at=new.at,
            generation=new.generation,
            based_on=old.generation if old else None,
            reason=reason,
        )
        seconds = time.monotonic() - seen
        if outcome == ConfigOutcome.APPLIED:
            self.counted(outcome, seconds)
        if installed:
            log.info("config_installed", generation=new.generation, why=reason, outcome=outcome)
        else:
            self.metrics.last_applied.set(time.time())
            if phases is not None:
                self.recent_phases.append(phases)
            log.info(
                "config_applied",
                generation=new.generation,
                outcome=outcome,
                why=reason,
                seconds=round(seconds, 3),
                **(phases or {}),
            )
        await self.events.emit(event, message, "Warning" if forced else "Normal")

    def counted(self, result: ConfigOutcome, seconds: float) -> None:
        self.metrics.applies.labels(result=result).inc()
        self.metrics.seconds.labels(result=result).observe(seconds)

    async def not_applied(
        self,
        files: FileSet,
        rejection: Rejection,
        result: ConfigOutcome,
        applied: Applied | None,
        *,
        seen: float,
        event: EventReason | None = None,
    ) -> None:
        """Refused (`event` None: the refusal's own Event) or held (its hold rule's Event)."""
        await self.history.record(
            result,
            files,
            applied.files if applied else None,
            at=rejection.at,
            generation=None,
            based_on=applied.generation if applied else None,
            reason=rejection.reason,
        )
        self.counted(result, time.monotonic() - seen)
        log.warning("config_not_applied", result=result, reason=rejection.reason, held_by=rejection.held_by)
        said = event or NOT_APPLIED_EVENTS[result]
        await self.events.emit(said, f"{files.short}: {rejection.reason}", "Warning")

    async def restored(self, restored: Restored) -> None:
        """An unverified set was replaced by the good one outside a rollback of ours."""
        log.warning(
            "unverified_set_was_replaced",
            by=restored.by,
            restored_generation=restored.restored_generation,
            unverified_generation=restored.unverified_generation,
        )
        await self.events.emit(
            EventReason.CONFIG_RESTORED,
            f"generation {restored.unverified_generation} was never verified; {restored.by} put "
            f"generation {restored.restored_generation} back",
            "Warning",
        )
