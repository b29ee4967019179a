"""How slurmctld takes a judged set: swapped in unverified, `scontrol reconfigure` (or a restart, for a
restart-required change), verified against what slurmctld reported before (apply/), kept, or rolled
back: the good set on disk, slurmctld reconfigured back to it, and what the change made Slurm do
undone (harm.py). A slurmctld that stops answering because control changes hands (HA) is no verdict
on the set: it is judged again under the controller in control."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from sidecars.configsync.apply import harm
from sidecars.configsync.apply.applier import Applier, ApplyOutcome
from sidecars.configsync.apply.views import SlurmView
from sidecars.configsync.apply.workers import RESTARTS_FROM
from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.ha.return_gate import handover
from sidecars.configsync.judge.validate import Verdict
from sidecars.configsync.report.record import change_phases
from sidecars.configsync.service.installing import Installer
from sidecars.configsync.settings import Settings
from sidecars.protocol.events import EventReason
from sidecars.runtime import offloop
from sidecars.slurm import SlurmClient, SlurmError

log = structlog.get_logger(__name__)

__all__ = ["CtldApply"]


def _kept(outcome: ApplyOutcome) -> str | None:
    """The history's word on the run-time node state the reconfigure took and config-sync put back."""
    return (outcome.kept.describe() or None) if outcome.kept is not None else None


@dataclass
class CtldApply:
    installer: Installer
    applier: Applier
    client: SlurmClient
    settings: Settings
    interrupt: asyncio.Event  # a later change: cuts a reconfigure's settle period short
    fixed_log_path: bool  # slurmctld's log named by the caller: not learnt from the applied set

    async def apply(
        self,
        files: FileSet,
        verdict: Verdict,
        before: SlurmView,
        *,
        seen: float,
        judged: float,
        forced: dict[str, Any] | None = None,
    ) -> None:
        st, s = self.installer.state, self.settings
        assert st.applied is not None and verdict.conf is not None
        applied = st.applied.files
        size = sum(e.size for e in applied.files.values())  # a MiB set's parse holds a loop 0.1 s
        old_conf = await offloop.sized(size, conffile.parse, applied, s.main_file, s.conf_dir)
        if not self.fixed_log_path:  # slurmctld's own words for a refusal, when its log is visible here
            logfile = old_conf.options.get("slurmctldlogfile")
            self.applier.tail.path = Path(logfile) if logfile else None
        # unverified until the outcome: a slurmctld restarted meanwhile gets the good set (stage.py)
        async with self.installer.unverified(files) as generation:
            swapped = time.monotonic()
            if verdict.restart_required:
                log.info("restarting_slurmctld", reasons=[str(r) for r in verdict.restart])
                outcome = await self.applier.restart(old_conf, verdict.conf, before)
            else:
                # a later change cuts this one's settle period short: its own verification goes on watching
                outcome = await self.applier.reconfigure(
                    old_conf, verdict.conf, before, interrupt=self.interrupt
                )
        # the set stays only if it is still the one on disk: slurmctld may have (re)started meanwhile,
        # and config-guard then put the good set back, which is what slurmctld runs on now
        kept = outcome.ok and await self.installer.verified()
        restored = self.installer.target.take_restored()
        if not kept and (outcome.ok or restored is not None):
            outcome.ok = False
            why = "slurmctld restarted before the change was verified"
            if restored is not None:
                why += f"; config-guard put generation {restored.restored_generation} back"
            outcome.reason = "; ".join(w for w in (outcome.reason, why) if w)
        if restored is not None:
            await self.installer.report_restored(restored)
        ha = self.installer.ha
        if not outcome.ok and outcome.controller_died and ha is not None:
            moving = await handover(ha)
            if moving is not None:  # control is changing hands: no verdict on the set
                await self._handed_over(files, moving)
                return
        if not outcome.ok:
            await self._rollback(files, outcome, seen)
            return
        await self.installer.keep(
            files,
            generation,
            seen=seen,
            forced=forced,
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
        )

    async def _handed_over(self, files: FileSet, why: str) -> None:
        """slurmctld stopped answering because control is changing hands (ha/return_gate.py), not because
        of the set: the good set goes back on this pod's disk (a standby's disk holds only verified
        sets), nothing is reconfigured, and the change is judged again under the controller in
        control (which applies it; this pod then stages it). Not a rejection, not a rollback."""
        self.installer.back_to_good()
        log.warning("config_judged_again_after_handover", why=why, sha256=files.short)
        st = self.installer.state
        st.pending = True
        st.backoff = self.settings.ha_poll_seconds
        await self.installer.report.record.events.emit(
            EventReason.CONFIG_HANDOVER,
            f"{files.short}: slurmctld stopped answering during the verification, but {why}; "
            "not a verdict on the set: judged again under the controller in control",
            "Normal",
        )
        await self.installer.report.notify()

    async def _rollback(self, files: FileSet, outcome: ApplyOutcome, seen: float) -> None:
        self.installer.back_to_good()
        log.warning("config_rolled_back_on_disk", reason=outcome.reason)
        if outcome.took_request and not outcome.controller_died:
            # slurmctld may have taken part of the set: have it read the good one again
            since = time.time()
            with contextlib.suppress(SlurmError):
                await self.applier.reconfigure_back(outcome.held)
            if outcome.harm is not None and not outcome.harm.ok:
                # then what Slurm set because of the change is taken back, and only that (harm.py)
                outcome.reason = "; ".join([outcome.reason, await self._undo(outcome.harm, since)])
        await self.installer.rolled_back(files, outcome.reason, seen)

    async def _undo(self, judged: harm.Harm, since: float) -> str:
        try:
            restarts = (await self.client.version()).at_least(*RESTARTS_FROM)
        except SlurmError:
            restarts = True  # the safe reading: wait for a registration that may never be seen
        undone = await harm.undo(
            self.client, judged, since, self.settings.registration_seconds, restarts=restarts
        )
        self.installer.state.undone = undone
        said = undone.describe()
        return f"undone after the rollback: {said}" if said else "nothing to undo"
