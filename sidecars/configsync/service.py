"""The config-sync daemon's core: one change set at a time, from the sources to a verified slurmctld.

Every outcome is kept for /status, counted in metrics, reported as an event and logged. Nothing that
failed validation (the dry run on a throwaway slurmctld included) is ever written to the target, so a
slurmctld that restarts at any moment after a refusal reads the last known good set; whatever the
live slurmctld then refuses is rolled back to that set, which survives a restart of this sidecar
under --state-dir. A change that would end or requeue jobs is held like a restart-required one,
unless forced (--allow-job-loss, or a `slurm-sidecars.force` key in the set naming who).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from sidecars.configsync import conffile, jobs
from sidecars.configsync.apply import Applier, ApplyOutcome
from sidecars.configsync.history import History
from sidecars.configsync.metrics import ConfigSyncMetrics
from sidecars.configsync.quiet import Debouncer, first_of, swapped_whole
from sidecars.configsync.record import Recorder, Rejection, change_phases, now_rfc3339
from sidecars.configsync.settings import Settings
from sidecars.configsync.sources import FileSet, SourceChanged, read_sources
from sidecars.configsync.stage import Applied, LastKnownGood, Restored, Target
from sidecars.configsync.validate import Validator, Verdict
from sidecars.configsync.views import SlurmView, view_if_up
from sidecars.runtime.events import EventSink
from sidecars.slurm import SlurmClient, SlurmError

log = structlog.get_logger(__name__)


class ConfigSync:
    def __init__(
        self,
        settings: Settings,
        client: SlurmClient,
        registry: CollectorRegistry,
        events: EventSink,
        *,
        validator: Validator | None = None,
        checkpoint: Callable[[str], None] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.events = events
        self.metrics = ConfigSyncMetrics(registry)
        self.target = Target(settings.target, checkpoint)
        self.lkg = LastKnownGood(settings.state_dir)
        self.validator = validator or Validator.from_settings(settings, client)
        self.applier = Applier(
            client,
            settle_seconds=settings.settle_seconds,
            restart_timeout=settings.restart_timeout_seconds,
            log_path=log_path,
        )
        self._fixed_log_path = log_path is not None
        self.applied: Applied | None = None
        self.forced: dict[str, Any] | None = None  # who forced the applied set past the job check, and why
        self.rejected: Rejection | None = None
        # the last time an unverified set was replaced by the good one outside a rollback of ours:
        # config-guard did it as slurmctld (re)started (stage.py), or this sidecar did at its start
        self.restored: Restored | None = None
        self.history = History(settings.history_limit, settings.secret_sources)
        self.record = Recorder(self.history, self.metrics, events)
        self.pending = False
        self.ready = False
        self.last_error: str | None = None
        self._wake = asyncio.Event()
        self.queue = asyncio.Lock()  # the apply queue: one change or one plan judged at a time
        self._changed = asyncio.Condition()
        self._backoff = 0.0
        self._debouncer = Debouncer(
            self._wake,
            lone_seconds=settings.debounce_seconds,
            max_seconds=settings.debounce_max_seconds,
            whole=lambda: swapped_whole(settings.sources),
        )

    # ------------------------------------------------------------------ reporting
    def history_view(self) -> dict[str, Any]:
        """`GET /history`: the last generations, newest first, with their diffs."""
        return self.history.as_json()

    def status(self) -> dict[str, Any]:
        a, r = self.applied, self.rejected
        runner = self.validator.dry_runner
        return {
            "applied": None
            if a is None
            else {"generation": a.generation, "sha256": a.files.sha256, "at": a.at, "forced": self.forced},
            "rejected": None
            if r is None
            else {"sha256": r.sha256, "reason": r.reason, "at": r.at, "jobs": list(r.jobs)},
            "restart_required": bool(r and r.restart_required),
            "held_for_jobs": list(r.jobs) if r else [],
            "pending": self.pending,
            "dry_run": None
            if runner is None
            else {"isolation": runner.current_isolation, "release_mismatch": runner.release_mismatch},
            # the workers' side of the last reconfigure (configsync/workers.py), None before one
            "workers": None if self.applier.workers.last is None else self.applier.workers.last.as_json(),
            "restored": None if self.restored is None else asdict(self.restored),
        }

    async def _notify(self) -> None:
        self.record.gauges(self.pending, self.rejected, self.applied)
        async with self._changed:
            self._changed.notify_all()

    async def wait_until(self, pred: Callable[[dict[str, Any]], bool], within: float) -> dict[str, Any]:
        """Wait until /status satisfies `pred` (tests and the benchmark await outcomes, never sleep)."""
        async with asyncio.timeout(within), self._changed:
            while not pred(self.status()):
                await self._changed.wait()
        return self.status()

    def wake(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------------ start-up
    async def start(self) -> None:
        """Bring the target to a known set before slurmctld (and readiness) depend on it."""
        self.target.recover()
        if self.validator.dry_runner is not None:
            await self.validator.dry_runner.isolation()  # decided once, before any change waits on it
            await self.validator.dry_runner.compare_releases()  # a mismatch said at start, not at a change
        self.applied = self.lkg.load()
        # a set left unverified (this sidecar ended mid-verification) goes; one the guard already
        # replaced as slurmctld restarted is reported
        restored = self.target.take_restored() or self._back_to_good("config-sync")
        if restored is not None:
            await self._report_restored(restored)
        on_disk = self.target.read(self.settings.max_file_bytes)
        if self.applied is not None and on_disk.sha256 != self.applied.files.sha256:
            # a crash between swap and verification left an unverified set: back to the good one
            log.warning(
                "target_differs_from_last_known_good",
                target_sha256=on_disk.short,
                lkg_sha256=self.applied.files.short,
            )
            self.target.swap(self.applied.files, self.applied.generation)
        elif self.applied is None and self.settings.main_file in on_disk.files:
            # first run beside an existing config: it is what slurmctld runs on, so it is the baseline
            self.applied = Applied(0, now_rfc3339(), on_disk)
        # ready only after the start-up pass: the sources are synced (or judged) before anyone relies on it
        await self.sync_once(startup=True)
        if self.applied is not None:
            self.ready = True
        await self._notify()

    # ------------------------------------------------------------------ the loop
    async def run(self, stop: asyncio.Event) -> None:
        s = self.settings
        if self.validator.dry_runner is not None and self.applied is not None:
            # the dry run's shadow of the state built now, once, not by the first change (seconds
            # at 10,000 jobs); ready already: a change arriving meanwhile waits as it would have
            current = conffile.parse(self.applied.files, s.main_file, s.target)
            await self.validator.dry_runner.warm(current)
        while not stop.is_set():
            timeout = self._backoff if self.pending and self._backoff else s.rehash_seconds
            await first_of(self._wake.wait(), stop.wait(), within=timeout)
            if stop.is_set():
                return
            if self._wake.is_set():
                await self._debouncer.wait(stop)
            try:
                await self.sync_once()
            except Exception as exc:  # one bad pass must not end the daemon; the next one retries
                log.error("sync_failed", error=str(exc), exc_info=True)
                self.last_error = str(exc)
                self.pending = True
                self._backoff = min(max(self._backoff * 2, 0.5), s.retry_max_seconds)
                await self._notify()
            # a change that arrived while this set was applied continues a burst
            self._debouncer.in_burst = self._wake.is_set()

    # ------------------------------------------------------------------ one change set
    def _read(self) -> FileSet | None:
        try:
            return read_sources(self.settings.sources, self.settings.max_file_bytes)
        except (OSError, SourceChanged) as exc:
            log.warning("sources_unreadable", error=str(exc))
            self.last_error = str(exc)
            return None

    async def sync_once(self, *, startup: bool = False) -> None:
        seen = time.monotonic()
        files = self._read()
        if files is None:
            self.pending = True
            await self._notify()
            return
        current = self.applied.files if self.applied else None
        log.debug("sync_pass", sha256=files.short, startup=startup)
        if current is not None and files.sha256 == current.sha256:
            if startup and self.applied is not None and self.applied.generation == 0:
                await self._adopt(files)  # same content: take over the layout, nothing for slurmctld to learn
            self.pending = False
            self._backoff = 0.0
            if self.rejected is not None:
                log.info("sources_back_to_applied_set", sha256=files.short)
                self.rejected = None
            await self._notify()
            return
        if self.rejected is not None and files.sha256 == self.rejected.sha256 and not self.rejected.jobs:
            self.pending = False  # judged already; a later fix is a new hash
            await self._notify()
            return
        # a set held for jobs is judged again at every pass (the re-hash timer): once they ended, it applies
        # every line about this change set names it, whichever step logs it
        with structlog.contextvars.bound_contextvars(sha256=files.short, files=sorted(files.files)):
            async with self.queue:  # a plan (planapi.py) waits for this change, and it for a plan
                await self._judge(files, current, seen, startup=startup)

    async def _judge(self, files: FileSet, current: FileSet | None, seen: float, *, startup: bool) -> None:
        """Validate a new set, then install, apply or reject it."""
        self.pending = True
        await self._notify()
        # what slurmctld reports now, read while the set is validated (it is the baseline to verify against)
        before_task = asyncio.create_task(view_if_up(self.client)) if current is not None else None
        try:
            verdict = await self.validator.validate(files, current)
            before = await before_task if before_task else None
            judged = time.monotonic()
        finally:
            if before_task and not before_task.done():
                before_task.cancel()
                await asyncio.gather(before_task, return_exceptions=True)
        if verdict.dry_run is not None:
            self.metrics.dry_run_seconds.observe(verdict.dry_run.seconds)
        if not verdict.ok:
            await self._reject(files, verdict.reason, "rejected", seen)
            return
        forced = None
        if verdict.jobs:
            who = jobs.forced_by(files, self.settings.allow_job_loss)
            risk = jobs.JobRisk(verdict.jobs)
            held = tuple(sorted(verdict.jobs))
            again = self.rejected is not None and self.rejected.sha256 == files.sha256
            if who is None and again and self.rejected is not None and self.rejected.jobs == held:
                self.pending = False  # still held for the same jobs: said already
                await self._notify()
                return
            if who is None:
                why = (
                    f"held: the change {risk.describe()}; "
                    f"to apply it anyway add a {jobs.FORCE_FILE} key naming who"
                )
                await self._reject(files, why, "held", seen, jobs=held)
                return
            forced = {"by": who, "jobs": sorted(verdict.jobs), "why": risk.describe()}
            log.warning("config_forced_past_jobs", forced_by=who, jobs=sorted(verdict.jobs))
        if current is None or (startup and before is None):
            # nothing runs on the target yet (first start, or slurmctld not started): it starts on this set
            await self._install(files, seen, reason="slurmctld is not running yet")
            return
        if verdict.restart_required and self.settings.restart_policy == "hold":
            why = "restart required: " + "; ".join(str(r) for r in verdict.restart)
            await self._reject(files, why, "restart_required", seen, restart_required=True)
            return
        if before is None:
            self._backoff = min(max(self._backoff * 2, 0.5), self.settings.retry_max_seconds)
            log.warning("slurmctld_unreachable_change_pending", retry_in=self._backoff)
            await self._notify()
            return
        await self._apply(files, verdict, before, seen=seen, judged=judged, forced=forced)

    async def _adopt(self, files: FileSet) -> None:
        assert self.applied is not None
        self.target.swap(files, 1)
        self.applied = Applied(1, now_rfc3339(), files)
        self.lkg.save(self.applied)
        self.ready = True

    async def _install(self, files: FileSet, seen: float, reason: str) -> None:
        generation = (self.applied.generation if self.applied else 0) + 1
        self.target.swap(files, generation)
        old, self.applied = self.applied, Applied(generation, now_rfc3339(), files)
        self.forced = None
        self.lkg.save(self.applied)
        self.ready = True
        self.pending = False
        self.rejected = None
        message = f"generation {generation} ({files.short}) installed: {reason}"
        await self.record.applied(
            self.applied, old, seen=seen, reason=reason, message=message, installed=True
        )
        await self._notify()

    async def _reject(
        self,
        files: FileSet,
        reason: str,
        result: str,
        seen: float,
        *,
        restart_required: bool = False,
        jobs: tuple[int, ...] = (),
    ) -> None:
        self.rejected = Rejection(files.sha256, reason, now_rfc3339(), restart_required, jobs)
        self.pending = False
        await self.record.not_applied(files, self.rejected, result, self.applied, seen=seen)
        await self._notify()

    async def _apply(
        self,
        files: FileSet,
        verdict: Verdict,
        before: SlurmView,
        *,
        seen: float,
        judged: float,
        forced: dict[str, Any] | None = None,
    ) -> None:
        assert self.applied is not None and verdict.conf is not None
        old_conf = conffile.parse(self.applied.files, self.settings.main_file, self.settings.target)
        if not self._fixed_log_path:  # slurmctld's own words for a refusal, when its log is visible here
            logfile = old_conf.options.get("slurmctldlogfile")
            self.applier.tail.path = Path(logfile) if logfile else None
        generation = self.applied.generation + 1
        # unverified until the outcome: a slurmctld restarted meanwhile gets the good set (stage.py)
        self.target.swap(files, generation, unverified=True)
        swapped = time.monotonic()
        try:
            if verdict.restart_required:
                log.info("restarting_slurmctld", reasons=[str(r) for r in verdict.restart])
                outcome = await self.applier.restart(old_conf, verdict.conf, before)
            else:
                # a later change cuts this one's settle period short: its own verification goes on watching
                outcome = await self.applier.reconfigure(old_conf, verdict.conf, before, interrupt=self._wake)
        except BaseException:
            # cancelled or broken mid-apply: never leave an unverified set on disk
            self._back_to_good("config-sync")
            raise
        # the set stays only if it is still the one on disk: slurmctld may have (re)started meanwhile,
        # and config-guard then put the good set back, which is what slurmctld runs on now
        kept = outcome.ok and self.target.verified()
        restored = self.target.take_restored()
        if not kept and (outcome.ok or restored is not None):
            outcome.ok = False
            why = "slurmctld restarted before the change was verified"
            if restored is not None:
                why += f"; config-guard put generation {restored.restored_generation} back"
            outcome.reason = "; ".join(w for w in (outcome.reason, why) if w)
        if restored is not None:
            await self._report_restored(restored)
        if outcome.ok:
            old, self.applied = self.applied, Applied(generation, now_rfc3339(), files)
            self.forced = forced
            self.lkg.save(self.applied)
            self.rejected = None
            self.pending = False
            self._backoff = 0.0
            await self.record.applied(
                self.applied,
                old,
                seen=seen,
                phases=change_phases(seen, judged, swapped, verdict.dry_run, outcome.reconfigure_seconds),
                reason="slurmctld restarted on it" if verdict.restart_required else None,
                message=f"generation {generation} ({files.short}) applied"
                + (" by restarting slurmctld" if verdict.restart_required else "")
                + (f", forced by {forced['by']}: it {forced['why']}" if forced else ""),
                forced=forced is not None,
            )
            await self._notify()
            return
        await self._rollback(files, outcome, verdict, seen)

    def _back_to_good(self, by: str) -> Restored | None:
        """Put the good generation kept beside an unverified set back (None when none was pending).
        Should that fail, the last known good set is written anew: never leave the unverified one."""
        try:
            return self.target.restore(by)
        except OSError as exc:
            log.error("restore_failed", error=str(exc))
            if self.applied is None:
                raise
            self.target.swap(self.applied.files, self.applied.generation)
            return None

    async def _report_restored(self, restored: Restored) -> None:
        self.restored = restored
        await self.record.restored(restored)

    async def _rollback(self, files: FileSet, outcome: ApplyOutcome, verdict: Verdict, seen: float) -> None:
        assert self.applied is not None
        self._back_to_good("config-sync")
        log.warning("config_rolled_back_on_disk", reason=outcome.reason)
        if outcome.took_request and not outcome.controller_died:
            # slurmctld may have taken part of the set: have it read the good one again
            with contextlib.suppress(SlurmError):
                await self.client.reconfigure()
        await self._reject(files, outcome.reason, "rolled_back", seen)
