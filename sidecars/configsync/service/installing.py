"""How a judged set reaches the target: installed as it is, applied to slurmctld and verified, or
refused; and the way back to the last known good set when the live slurmctld refuses it."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import structlog

from sidecars.configsync import holds
from sidecars.configsync.apply import harm
from sidecars.configsync.apply.applier import ApplyOutcome
from sidecars.configsync.apply.views import SlurmView
from sidecars.configsync.apply.workers import RESTARTS_FROM
from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.fileset.stage import Applied, LastKnownGood, Restored, Target
from sidecars.configsync.ha.return_gate import handover
from sidecars.configsync.holds import Change, HoldRule
from sidecars.configsync.judge.validate import Verdict
from sidecars.configsync.report.record import Rejection, change_phases, now_rfc3339
from sidecars.configsync.service.reporting import Reporting
from sidecars.configsync.settings import Settings
from sidecars.protocol.configsync import ConfigOutcome
from sidecars.protocol.events import EventReason
from sidecars.runtime import offloop
from sidecars.slurm import SlurmClient, SlurmError

log = structlog.get_logger(__name__)

__all__ = ["Installing"]


def _kept(outcome: ApplyOutcome) -> str | None:
    """The history's word on the run-time node state the reconfigure took and config-sync put back."""
    return (outcome.kept.describe() or None) if outcome.kept is not None else None


class Installing(Reporting):
    """The part of the daemon that writes the target; the attributes are set by ConfigSync.__init__."""

    settings: Settings
    client: SlurmClient
    target: Target
    lkg: LastKnownGood
    ready: bool
    _fixed_log_path: bool
    _backoff: float
    _rejected_moves: int
    undone: harm.Undone | None
    hold_rules: tuple[HoldRule, ...]

    async def _adopt(self, files: FileSet) -> None:
        assert self.applied is not None
        await offloop.whole(self.target.swap, files, 1)  # written and fsynced: off the loop
        self.applied = Applied(1, now_rfc3339(), files)
        await offloop.whole(self.lkg.save, self.applied)
        self.ready = True

    async def _install(self, files: FileSet, seen: float, reason: str) -> None:
        generation = (self.applied.generation if self.applied else 0) + 1
        await offloop.whole(self.target.swap, files, generation)  # written and fsynced: off the loop
        old, self.applied = self.applied, Applied(generation, now_rfc3339(), files)
        self.forced = None
        await offloop.whole(self.lkg.save, self.applied)
        self.ready = True
        self.pending = False
        self.rejected = None
        message = f"generation {generation} ({files.short}) installed: {reason}"
        await self._record_applied(
            self.applied, old, seen=seen, reason=reason, message=message, installed=True
        )
        await self._notify()

    async def _reject(
        self,
        files: FileSet,
        reason: str,
        result: ConfigOutcome,
        seen: float,
    ) -> None:
        self.rejected = Rejection(files.sha256, reason, now_rfc3339())
        self._rejected_moves = self.ha.moves if self.ha is not None else 0
        self.pending = False
        await self.record.not_applied(files, self.rejected, result, self.applied, seen=seen)
        await self._notify()

    async def _held(self, change: Change, seen: float) -> bool:
        """Does a hold rule hold this judged change? (configsync/holds) Held: said, unless it was
        held for the same already (a rule judged again at every pass)."""
        found = await holds.first_hold(self.hold_rules, change)
        if found is None:
            return False
        rule, hold = found
        r, files = self.rejected, change.files
        if (
            r is not None
            and r.sha256 == files.sha256
            and r.held_by == rule.name
            and r.jobs == hold.jobs
            and (hold.jobs or r.reason == hold.reason)
        ):
            self.pending = False  # still held for the same: said already
            await self._notify()
            return True
        self.rejected = Rejection(
            files.sha256, hold.reason, now_rfc3339(), hold.restart_required, hold.jobs, rule.name, rule.again
        )
        self._rejected_moves = self.ha.moves if self.ha is not None else 0
        self.pending = False
        await self.record.not_applied(
            files, self.rejected, rule.outcome, self.applied, seen=seen, event=rule.event
        )
        await self._notify()
        return True

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
        applied = self.applied.files
        size = sum(e.size for e in applied.files.values())  # a MiB set's parse holds a loop 0.1 s
        old_conf = await offloop.sized(
            size, conffile.parse, applied, self.settings.main_file, self.settings.conf_dir
        )
        if not self._fixed_log_path:  # slurmctld's own words for a refusal, when its log is visible here
            logfile = old_conf.options.get("slurmctldlogfile")
            self.applier.tail.path = Path(logfile) if logfile else None
        generation = self.applied.generation + 1
        # unverified until the outcome: a slurmctld restarted meanwhile gets the good set (stage.py)
        try:
            # written and fsynced off the loop; in the try: cancelled meanwhile, the good set goes back
            await offloop.whole(self.target.swap, files, generation, unverified=True)
            swapped = time.monotonic()
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
        kept = outcome.ok and await offloop.whole(self.target.verified)
        restored = self.target.take_restored()
        if not kept and (outcome.ok or restored is not None):
            outcome.ok = False
            why = "slurmctld restarted before the change was verified"
            if restored is not None:
                why += f"; config-guard put generation {restored.restored_generation} back"
            outcome.reason = "; ".join(w for w in (outcome.reason, why) if w)
        if restored is not None:
            await self._report_restored(restored)
        if not outcome.ok and outcome.controller_died and self.ha is not None:
            moving = await handover(self.ha)
            if moving is not None:  # control is changing hands: no verdict on the set
                await self._handed_over(files, moving)
                return
        if outcome.ok:
            old, self.applied = self.applied, Applied(generation, now_rfc3339(), files)
            self.forced = forced
            # the set in base64 in JSON, written and fsynced: tens of ms for a MiB on a busy disk
            await offloop.whole(self.lkg.save, self.applied)
            self.rejected = None
            self.pending = False
            self._backoff = 0.0
            await self._record_applied(
                self.applied,
                old,
                seen=seen,
                phases=change_phases(
                    seen,
                    judged,
                    swapped,
                    None if verdict.dry_run is None else verdict.dry_run.seconds,
                    outcome.reconfigure_seconds,
                ),
                reason="; ".join(w for w in ("slurmctld restarted on it", _kept(outcome)) if w)
                if verdict.restart_required
                else _kept(outcome),
                message=f"generation {generation} ({files.short}) applied"
                + (" by restarting slurmctld" if verdict.restart_required else "")
                + (f", forced by {forced['by']}: it {forced['why']}" if forced else ""),
                forced=forced is not None,
            )
            await self._notify()
            return
        await self._rollback(files, outcome, verdict, seen)

    async def _handed_over(self, files: FileSet, why: str) -> None:
        """slurmctld stopped answering because control is changing hands (ha/return_gate.py), not because
        of the set: the good set goes back on this pod's disk (a standby's disk holds only verified
        sets), nothing is reconfigured, and the change is judged again under the controller in
        control (which applies it; this pod then stages it). Not a rejection, not a rollback."""
        self._back_to_good("config-sync")
        log.warning("config_judged_again_after_handover", why=why, sha256=files.short)
        self.pending = True
        self._backoff = self.settings.ha_poll_seconds
        await self.record.events.emit(
            EventReason.CONFIG_HANDOVER,
            f"{files.short}: slurmctld stopped answering during the verification, but {why}; "
            "not a verdict on the set: judged again under the controller in control",
            "Normal",
        )
        await self._notify()

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
            since = time.time()
            with contextlib.suppress(SlurmError):
                await self.applier.reconfigure_back(outcome.held)
            if outcome.harm is not None and not outcome.harm.ok:
                # then what Slurm set because of the change is taken back, and only that (harm.py)
                outcome.reason = "; ".join([outcome.reason, await self._undo(outcome.harm, since)])
        await self._reject(files, outcome.reason, ConfigOutcome.ROLLED_BACK, seen)

    async def _undo(self, judged: harm.Harm, since: float) -> str:
        try:
            restarts = (await self.client.version()).at_least(*RESTARTS_FROM)
        except SlurmError:
            restarts = True  # the safe reading: wait for a registration that may never be seen
        self.undone = await harm.undo(
            self.client, judged, since, self.settings.registration_seconds, restarts=restarts
        )
        said = self.undone.describe()
        return f"undone after the rollback: {said}" if said else "nothing to undo"
