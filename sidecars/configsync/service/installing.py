"""How a judged set reaches the target, whichever daemon it is for: installed as it is (nothing runs on
the target yet), swapped in unverified while the daemon takes it, kept once verified, refused or held,
and the way back to the last known good set. It is handed the daemon's state (state.py) and the
reporter (reporting.py); how a daemon takes a set is its strategy's (ctld.py, slurmdbd/, restd/)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from sidecars.configsync import holds
from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.fileset.stage import Applied, LastKnownGood, Restored, Target
from sidecars.configsync.ha.coordination import Coordination
from sidecars.configsync.holds import Change, HoldRule
from sidecars.configsync.report.record import Rejection, now_rfc3339
from sidecars.configsync.service.reporting import Reporter
from sidecars.configsync.service.state import SyncState
from sidecars.protocol.configsync import ConfigOutcome, RestoredBy
from sidecars.runtime import offloop

log = structlog.get_logger(__name__)

__all__ = ["Installer"]


@dataclass
class Installer:
    state: SyncState
    report: Reporter
    target: Target
    lkg: LastKnownGood
    hold_rules: Sequence[HoldRule]  # the Slurm states (and policies) a judged change waits under
    ha: Coordination | None = None  # with peers: a rejection is made under the role changes seen so far

    def _generation(self) -> int:
        return (self.state.applied.generation if self.state.applied else 0) + 1

    async def adopt(self, files: FileSet) -> None:
        """The sources hold what the target held before config-sync: take over the layout as generation 1."""
        await offloop.whole(self.target.swap, files, 1)  # written and fsynced: off the loop
        self.state.applied = Applied(1, now_rfc3339(), files)
        await offloop.whole(self.lkg.save, self.state.applied)
        self.state.ready = True

    async def install(self, files: FileSet, seen: float, reason: str) -> None:
        """Nothing runs on the target yet: the set is written as it is, and the daemon starts on it."""
        generation = self._generation()
        await offloop.whole(self.target.swap, files, generation)  # written and fsynced: off the loop
        self.state.ready = True
        message = f"generation {generation} ({files.short}) installed: {reason}"
        await self.keep(files, generation, seen=seen, reason=reason, message=message, installed=True)

    @contextlib.asynccontextmanager
    async def unverified(self, files: FileSet) -> AsyncIterator[int]:
        """The set swapped in as the next generation, unverified until `keep`: a daemon restarted
        meanwhile gets the good set (stage.py), and so does the target if the block is cancelled or
        breaks. Yields the generation."""
        generation = self._generation()
        try:
            # written and fsynced off the loop; in the try: cancelled meanwhile, the good set goes back
            await offloop.whole(self.target.swap, files, generation, unverified=True)
            yield generation
        except BaseException:
            self.back_to_good()
            raise

    async def verified(self) -> bool:
        """Is the unverified set still the one on disk? (nobody put the good one back meanwhile)"""
        return bool(await offloop.whole(self.target.verified))

    async def keep(
        self,
        files: FileSet,
        generation: int,
        *,
        seen: float,
        forced: dict[str, Any] | None = None,
        **said: Any,
    ) -> None:
        """`files` is the good set now, as `generation`: kept under --state-dir and said (`said`: the
        Recorder's words for it)."""
        st = self.state
        old, st.applied = st.applied, Applied(generation, now_rfc3339(), files)
        st.forced = forced
        # the set in base64 in JSON, written and fsynced: tens of ms for a MiB on a busy disk
        await offloop.whole(self.lkg.save, st.applied)
        st.rejected = None
        st.pending = False
        st.backoff = 0.0
        await self.report.applied(st.applied, old, seen=seen, forced=forced is not None, **said)
        await self.report.notify()

    async def reject(self, files: FileSet, reason: str, result: ConfigOutcome, seen: float) -> None:
        rejection = self._not_applied(Rejection(files.sha256, reason, now_rfc3339()))
        await self.report.record.not_applied(files, rejection, result, self.state.applied, seen=seen)
        await self.report.notify()

    async def rolled_back(self, files: FileSet, reason: str, seen: float) -> None:
        """The live daemon refused the set, and the good one is back (`back_to_good`, then the daemon
        taken back to it): said as rolled back."""
        await self.reject(files, reason, ConfigOutcome.ROLLED_BACK, seen)

    async def held(self, change: Change, seen: float) -> bool:
        """Does a hold rule hold this judged change? (configsync/holds) Held: said, unless it was
        held for the same already (a rule judged again at every pass)."""
        found = await holds.first_hold(tuple(self.hold_rules), change)
        if found is None:
            return False
        rule, hold = found
        r, files = self.state.rejected, change.files
        if (
            r is not None
            and r.sha256 == files.sha256
            and r.held_by == rule.name
            and r.jobs == hold.jobs
            and (hold.jobs or r.reason == hold.reason)
        ):
            self.state.pending = False  # still held for the same: said already
            await self.report.notify()
            return True
        rejection = self._not_applied(
            Rejection(
                files.sha256,
                hold.reason,
                now_rfc3339(),
                hold.restart_required,
                hold.jobs,
                rule.name,
                rule.again,
            )
        )
        await self.report.record.not_applied(
            files, rejection, rule.outcome, self.state.applied, seen=seen, event=rule.event
        )
        await self.report.notify()
        return True

    def _not_applied(self, rejection: Rejection) -> Rejection:
        self.state.rejected = rejection
        self.state.rejected_moves = self.ha.moves if self.ha is not None else 0
        self.state.pending = False
        return rejection

    def back_to_good(self) -> Restored | None:
        """Put the good generation kept beside an unverified set back (None when none was pending).
        Should that fail, the last known good set is written anew: never leave the unverified one."""
        try:
            return self.target.restore(RestoredBy.CONFIG_SYNC)
        except OSError as exc:
            log.error("restore_failed", error=str(exc))
            if self.state.applied is None:
                raise
            self.target.swap(self.state.applied.files, self.state.applied.generation)
            return None

    async def report_restored(self, restored: Restored) -> None:
        self.state.restored = restored
        await self.report.record.restored(restored)
