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
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from sidecars.configsync import holds
from sidecars.configsync.apply.applier import Applier
from sidecars.configsync.apply.views import view_if_up
from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.quiet import Debouncer, first_of, swapped_whole
from sidecars.configsync.fileset.sources import FileSet, SourceChanged, read_sources
from sidecars.configsync.fileset.stage import Applied, LastKnownGood, Target
from sidecars.configsync.ha.control import Keeper
from sidecars.configsync.ha.coordination import Coordination
from sidecars.configsync.ha.return_gate import ReturnGate
from sidecars.configsync.ha.rollout import Rollout
from sidecars.configsync.holds import Change, HoldRule
from sidecars.configsync.judge import jobs
from sidecars.configsync.judge.validate import Judge, Validator, Verdict
from sidecars.configsync.report.history import History
from sidecars.configsync.report.metrics import ConfigSyncMetrics
from sidecars.configsync.report.record import Recorder, now_rfc3339
from sidecars.configsync.service.ctld import CtldApply
from sidecars.configsync.service.installing import Installer
from sidecars.configsync.service.reporting import HAParts, Reporter
from sidecars.configsync.service.state import SyncState
from sidecars.configsync.service.strategy import Make
from sidecars.configsync.settings import Settings
from sidecars.protocol.configsync import ConfigOutcome, HaRole
from sidecars.runtime import offloop
from sidecars.runtime.events import EventSink
from sidecars.slurm import SlurmClient, daemons

log = structlog.get_logger(__name__)

SLURMCTLD_TIMEOUT_DEFAULT_SECONDS = 120.0  # Slurm's default SlurmctldTimeout
TAKEOVER_MARGIN_SECONDS = 5.0  # a backup takes control 1-3 s after SlurmctldTimeout (docs/ha.md)


def parse_seconds(value: str | None, default: float) -> float:
    """A slurm.conf number of seconds; the default when unset or not a number (Slurm refuses those)."""
    try:
        return float(value) if value else default
    except ValueError:
        return default


class ConfigSync:
    """The one config-sync service: its state (state.py) owned here, and handed to the installer
    (installing.py) and the reporter (reporting.py) it is made of."""

    # given each set read from the sources, in the reading thread (main.py: the redactor's values)
    learn_secrets: Callable[[FileSet], None] | None = None

    def __init__(
        self,
        settings: Settings,
        client: SlurmClient,
        registry: CollectorRegistry,
        events: EventSink,
        *,
        validator: Judge | None = None,
        checkpoint: Callable[[str], None] | None = None,
        log_path: Path | None = None,
        hold_rules: Sequence[HoldRule] | None = None,
        strategy: Make | None = None,
        target: Target | None = None,
    ) -> None:
        """`strategy`: another daemon's read, judge and apply (slurmdbd, slurmrestd); None: slurmctld's,
        the service's own. `target`: the staging directory as that daemon needs it (its modes)."""
        self.settings = settings
        self.client = client
        self.events = events
        self.state = SyncState()
        # the Slurm states (and policies) a judged change waits under (configsync/holds)
        hold_rules = tuple(holds.rules() if hold_rules is None else hold_rules)
        self.metrics = ConfigSyncMetrics(
            registry, [r.name for r in hold_rules], [r.outcome for r in hold_rules]
        )
        # slurmctld's apply (apply/): its workers, harm and node state; another daemon's strategy has its own
        self.applier = (
            None
            if strategy is not None
            else Applier(
                client,
                settle_seconds=settings.settle_seconds,
                restart_timeout=settings.restart_timeout_seconds,
                log_path=log_path,
                registration_seconds=settings.registration_seconds,
            )
        )
        self.history = History(settings.history_limit, settings.secret_sources)
        self.record = Recorder(self.history, self.metrics, events)
        # HA (ha/coordination.py): with peers, only the config-sync beside the controller in control applies
        self.ha = (
            None
            if not settings.peers or settings.controller is None
            else Coordination(
                settings.controller,
                settings.peers,
                registry,
                env=client.env,
                token=settings.viewer_token,
                tls=settings.peer_tls,
            )
        )
        self.ha_parts = (
            None
            if self.ha is None
            else HAParts(
                self.ha,
                Rollout(self.ha, self.record, settings.ha_catch_up_seconds),
                # a pod back while a peer's controller is in control: not ready until it holds that set
                ReturnGate(),
                Keeper(self.ha, events),  # never without a controller in control (ha/control.py)
            )
        )
        self.reporter = Reporter(
            self.state,
            self.record,
            self.history,
            lambda: self.validator.dry_runner,
            self.applier,
            self.ha_parts,
        )
        self.installer = Installer(
            self.state,
            self.reporter,
            target or Target(settings.target, checkpoint),
            LastKnownGood(settings.state_dir),
            hold_rules,
            self.ha,
        )
        self._wake = asyncio.Event()
        self.strategy = None if strategy is None else strategy(self.installer)
        self.validator: Judge
        self.ctld: CtldApply | None = None
        if self.strategy is not None:
            self.validator = self.strategy.validator
            self.reporter.extra = self.strategy.status
        else:
            assert self.applier is not None
            self.validator = validator or Validator.from_settings(settings, client)
            self.ctld = CtldApply(
                self.installer,
                self.applier,
                client,
                settings,
                self._wake,
                fixed_log_path=log_path is not None,
            )
        self.queue = asyncio.Lock()  # the apply queue: one change or one plan judged at a time
        self._debouncer = Debouncer(
            self._wake,
            lone_seconds=settings.debounce_seconds,
            max_seconds=settings.debounce_max_seconds,
            whole=lambda: swapped_whole(settings.sources),
        )
        self._rejection_stands = False  # a takeover we asked for: the role change it makes keeps a rejection
        self._standby_verdict: tuple[str, Verdict] | None = None  # a standby validates a set once
        self._last_sources: FileSet | None = None
        self._takeover_seconds = ("", SLURMCTLD_TIMEOUT_DEFAULT_SECONDS + TAKEOVER_MARGIN_SECONDS)

    # ------------------------------------------------------------------ what others read and wait on
    @property
    def target(self) -> Target:
        return self.installer.target

    @property
    def lkg(self) -> LastKnownGood:
        return self.installer.lkg

    @property
    def applied(self) -> Applied | None:
        return self.state.applied

    @property
    def ready(self) -> bool:
        return self.state.ready

    def status(self) -> dict[str, Any]:
        return self.reporter.status()

    def history_view(self) -> dict[str, Any]:
        return self.reporter.history_view()

    async def wait_until(self, pred: Callable[[dict[str, Any]], bool], within: float) -> dict[str, Any]:
        return await self.reporter.wait_until(pred, within)

    def wake(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------------ start-up
    async def start(self) -> None:
        """Bring the target to a known set before slurmctld (and readiness) depend on it."""
        self.target.recover()
        if self.validator.dry_runner is not None:
            await self.validator.dry_runner.isolation()  # decided once, before any change waits on it
            await self.validator.dry_runner.compare_releases()  # a mismatch said at start, not at a change
        self.state.applied = self.lkg.load()
        # a set left unverified (this sidecar ended mid-verification) goes; one the guard already
        # replaced as slurmctld restarted is reported
        restored = self.target.take_restored() or self.installer.back_to_good()
        if restored is not None:
            await self.installer.report_restored(restored)
        on_disk = self.target.read(self.settings.max_file_bytes)
        if self.applied is not None and on_disk.sha256 != self.applied.files.sha256:
            # a crash between swap and verification left an unverified set: back to the good one
            log.warning(
                "target_differs_from_last_known_good",
                target_sha256=on_disk.short,
                lkg_sha256=self.applied.files.short,
            )
            await offloop.whole(self.target.swap, self.applied.files, self.applied.generation)
        elif self.applied is None and self.settings.main_file in on_disk.files:
            # first run beside an existing config: it is what slurmctld runs on, so it is the baseline
            self.state.applied = Applied(0, now_rfc3339(), on_disk)
        # ready only after the start-up pass: the sources are synced (or judged) before anyone relies on it
        await self.sync_once(startup=True)
        if self.applied is not None and self.validator.dry_runner is not None:
            # the dry run's copy of the state prepared before ready (seconds at 10,000 jobs), so no
            # change judged after it pays for that; main.py's "dry_run_state" keeps it in step
            s = self.settings
            await self.validator.dry_runner.warm(conffile.parse(self.applied.files, s.main_file, s.conf_dir))
        if self.applied is not None:
            self.state.ready = True
        await self._judge_return()
        await self.reporter.notify()

    async def _judge_return(self) -> None:
        """With peers, until this pod's slurmctld may start: does it hold what the one in control runs?
        (and has that one, when Slurm would hand control back to this one, shut down first)"""
        if self.ha_parts is None or self.ha_parts.gate.open:
            return
        gate, ha = self.ha_parts.gate, self.ha_parts.coordination
        held = self.applied.files.sha256 if self.applied is not None and self.ready else None
        sources = self._last_sources.sha256 if self._last_sources is not None else None
        gate.judge(ha, held, sources, self._takeover_bound())
        if gate.stands_down is not None and await gate.stand_down(ha):
            await self.reporter.notify()

    def _takeover_bound(self) -> float:
        """SlurmctldTimeout of the held set and a margin: when a backup should have taken control."""
        held = self.applied.files.sha256 if self.applied is not None else ""
        if self.applied is not None and self._takeover_seconds[0] != held:
            # the held set's own SlurmctldTimeout, parsed once per set (not at every pass)
            conf = conffile.parse(self.applied.files, self.settings.main_file, self.settings.conf_dir)
            timeout = parse_seconds(conf.options.get("slurmctldtimeout"), SLURMCTLD_TIMEOUT_DEFAULT_SECONDS)
            self._takeover_seconds = (held, timeout + TAKEOVER_MARGIN_SECONDS)
        return self._takeover_seconds[1]

    def _put_good_back(self) -> str:
        """The last good set in this pod's directory (a standby reads it when it takes control)."""
        if self.applied is None:
            return "no good set known to put back"
        a = self.applied
        self.installer.back_to_good()
        if self.target.read(self.settings.max_file_bytes).sha256 == a.files.sha256:
            return f"generation {a.generation} ({a.files.short}) in place"
        self.target.swap(a.files, a.generation)
        return f"generation {a.generation} ({a.files.short}) put back"

    # ------------------------------------------------------------------ the loop
    async def run(self, stop: asyncio.Event) -> None:
        s = self.settings
        # (the dry run's shadow of the state is built by start() and kept in step by a task of its
        # own, beside this loop: main.py's "dry_run_state", DryRunner.keep_state)
        while not stop.is_set():
            timeout = self.state.backoff if self.state.pending and self.state.backoff else s.rehash_seconds
            if self.ha is not None and not self.ha.in_step(
                self.applied.files.sha256 if self.applied else None
            ):
                timeout = min(timeout, s.ha_poll_seconds)  # until every peer holds this set
            if self.ha_parts is not None and not self.ha_parts.gate.open:
                timeout = min(timeout, s.ha_poll_seconds)  # a returning pod asks until it may start
            if self.ha_parts is not None and self.ha_parts.keeper.watching():
                timeout = min(timeout, s.ha_poll_seconds)  # a controller may have let go: ask often
            await first_of(self._wake.wait(), stop.wait(), within=timeout)
            if stop.is_set():
                return
            if self._wake.is_set():
                await self._debouncer.wait(stop)
            try:
                await self.sync_once()
                await self._judge_return()
            except Exception as exc:  # one bad pass must not end the daemon; the next one retries
                log.error("sync_failed", error=str(exc), exc_info=True)
                self.state.last_error = str(exc)
                self.state.pending = True
                self.state.back_off(s.retry_max_seconds)
                await self.reporter.notify()
            # a change that arrived while this set was applied continues a burst
            self._debouncer.in_burst = self._wake.is_set()

    # ------------------------------------------------------------------ one change set
    def _read(self) -> FileSet | None:
        """The sources' set, its secret values learnt (`learn_secrets`) before any text about it is
        shown. In a thread (sync_once): a MiB read and its values are no work for the loop."""
        try:
            files = read_sources(self.settings.sources, self.settings.max_file_bytes)
        except (OSError, SourceChanged) as exc:
            log.warning("sources_unreadable", error=str(exc))
            self.state.last_error = str(exc)
            return None
        if self.learn_secrets is not None:
            self.learn_secrets(files)
        return files if self.strategy is None else self.strategy.read(files)

    async def sync_once(self, *, startup: bool = False) -> None:
        seen = time.monotonic()
        files = await offloop.whole(offloop.in_lane, self._read)
        self._last_sources = files
        if files is None:
            self.state.pending = True
            await self.reporter.notify()
            return
        current = self.applied.files if self.applied else None
        log.debug("sync_pass", sha256=files.short, startup=startup)
        if self.ha is not None:  # who writes, and what the peers hold, as of this pass
            await self.ha.refresh_role()
            await self.ha.refresh_peers()
            if self.ha_parts is not None:
                await self.ha_parts.rollout.step(self.applied)  # has every pod caught up with the held set?
            # no controller in control: the one that can take it does (ha/control.py); control then
            # comes back by our own request, no reason to judge a refused set again (the controller
            # that dropped control on it would drop it again)
            keeper = self.ha_parts.keeper if self.ha_parts is not None else None
            if keeper is not None and await keeper.check(self._takeover_bound(), self._put_good_back):
                self._rejection_stands = True
            if self._rejection_stands and self.ha.writes:
                self.state.rejected_moves, self._rejection_stands = self.ha.moves, False
        if current is not None and files.sha256 == current.sha256:
            if startup and self.applied is not None and self.applied.generation == 0:
                await self.installer.adopt(
                    files
                )  # same content: take over the layout, nothing for slurmctld to learn
            self.state.pending = False
            self.state.backoff = 0.0
            if self.state.rejected is not None:
                log.info("sources_back_to_applied_set", sha256=files.short)
                self.state.rejected = None
            await self.reporter.notify()
            return
        moved = self.ha is not None and self.ha.moves != self.state.rejected_moves
        if (
            self.state.rejected is not None
            and files.sha256 == self.state.rejected.sha256
            and not self.state.rejected.again  # a hold rule's state may change by itself (jobs end)
            and not moved  # judged under another controller in control (a takeover): judged again
        ):
            self.state.pending = False  # judged already; a later fix is a new hash
            await self.reporter.notify()
            return
        # a set held for jobs is judged again at every pass (the re-hash timer): once they ended, it applies
        # every line about this change set names it, whichever step logs it
        with structlog.contextvars.bound_contextvars(sha256=files.short, files=sorted(files.files)):
            async with self.queue:  # a plan (plans/api.py) waits for this change, and it for a plan
                await self._judge(files, current, seen, startup=startup)
        if self.ha_parts is not None and self.ha_parts.coordination.writes:
            self.ha_parts.keeper.after_change()  # a failed reconfigure can drop control: ask often a while

    async def _judge(self, files: FileSet, current: FileSet | None, seen: float, *, startup: bool) -> None:
        """Validate a new set, then install, apply or reject it: by the daemon's strategy, or slurmctld's."""
        if self.strategy is None:
            await self._judge_ctld(files, current, seen, startup=startup)
            return
        verdict = await self.strategy.judge(files, current, seen, startup=startup)
        if verdict is not None:
            assert current is not None  # a strategy installs a set when nothing was staged before
            await self.strategy.apply(files, current, verdict, seen)

    async def _judge_ctld(
        self, files: FileSet, current: FileSet | None, seen: float, *, startup: bool
    ) -> None:
        self.state.pending = True
        await self.reporter.notify()
        standby = self.ha is not None and not self.ha.writes
        # what slurmctld reports now, read while the set is validated (it is the baseline to verify
        # against); a standby verifies nothing, so it reads it only at its start
        need_view = current is not None and (not standby or startup)
        before_task = asyncio.create_task(view_if_up(self.client)) if need_view else None
        try:
            cached = self._standby_verdict if standby else None
            if cached is not None and cached[0] == files.sha256:
                verdict = cached[1]  # a standby waiting for the writer does not dry-run the set again
            else:
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
            await self.installer.reject(files, verdict.reason, ConfigOutcome.REJECTED, seen)
            return
        # a pod back while a peer writes installs nothing unchecked by the writer: it follows (_follow)
        hp = self.ha_parts
        peer_writes = bool(hp and not hp.gate.open and hp.coordination.writer()[0])
        # nothing runs on the target yet (first start, or slurmctld not started): it starts on this set
        installs = current is None or (startup and before is None and not peer_writes)
        change = Change(files, verdict, self.settings, self.client, daemons.SLURMCTLD, installs)
        if await self.installer.held(change, seen):
            return
        forced = None
        who = jobs.forced_by(files, self.settings.allow_job_loss) if verdict.jobs else None
        if who is not None:  # past the jobs it would end: who forced it, said with the applied set
            forced = {"by": who, "jobs": sorted(verdict.jobs), "why": jobs.JobRisk(verdict.jobs).describe()}
            log.warning("config_forced_past_jobs", forced_by=who, jobs=sorted(verdict.jobs))
        if installs:
            await self.installer.install(files, seen, reason="slurmctld is not running yet")
            return
        if self.ha is not None:
            if await self.ha.refresh_role() != HaRole.IN_CONTROL:
                self._standby_verdict = (files.sha256, verdict)
                await self._follow(files, seen)
                return
            self.ha.waiting_for = self.ha.waiting_why = None  # in control now: it applies, waits on no one
        if before is None:
            self.state.back_off(self.settings.retry_max_seconds)
            log.warning("slurmctld_unreachable_change_pending", retry_in=self.state.backoff)
            await self.reporter.notify()
            return
        assert self.ctld is not None
        await self.ctld.apply(files, verdict, before, seen=seen, judged=judged, forced=forced)

    async def _follow(self, files: FileSet, seen: float) -> None:
        """A standby's pod: stage the set once the writer reports it verified, else wait and ask again."""
        assert self.ha is not None
        writer, why = self.ha.writer()
        if writer is not None and writer.applied_sha256 == files.sha256:
            self.ha.waiting_for = self.ha.waiting_why = None
            self._standby_verdict = None
            self.ha.metrics.staged.inc()
            await self.installer.install(
                files,
                seen,
                reason=f"staged beside a {self.ha.role} controller: {writer.controller}, in control, runs it",
            )
            return
        if writer is not None:
            held = writer.applied_sha256[:12] if writer.applied_sha256 else "no set"
            why = f"{writer.controller}, in control, runs {held}" + (
                " (its change pending)" if writer.pending else ""
            )
        self.ha.waiting_for, self.ha.waiting_why = files.sha256, why
        log.info("ha_standby_waits_for_writer", why=why)
        self.state.pending = True
        self.state.backoff = self.settings.ha_poll_seconds
        await self.reporter.notify()
