"""config-sync beside slurmrestd (`config-sync --daemon slurmrestd`): slurm.conf from its ConfigMap and
the JWT key from its Secret, judged (check.py), staged 0400 (slurmrestd's user runs config-sync in its
pod, so it owns what is staged and alone may read it: Slurm refuses a key others can read), and applied
by a drained restart (drain.py): not ready, the open connections waited out, then slurmrestd restarted.
With a turn (turns.py, --restd-turn-lease) the replicas do it one at a time: the change waits, pending,
until this replica holds the turn, and nothing is staged before.

The rest is config-sync's own: the sources read and hashed, the atomic swap with its unverified marker,
the last known good set under --state-dir, history, metrics, Events, /status. A set counts once a new
slurmrestd listens on it; one that does not come up is rolled back, and slurmrestd restarted once more
on the good set. At config-sync's start, with nothing listening yet (slurmrestd's container starts
after config-sync is ready), the set is installed and slurmrestd starts on it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from sidecars.configsync.fileset.sources import FileEntry, FileSet
from sidecars.configsync.fileset.stage import Target
from sidecars.configsync.holds.rule import Change
from sidecars.configsync.judge.validate import Judge, Verdict
from sidecars.configsync.restd import inflight
from sidecars.configsync.restd.check import RestdValidator
from sidecars.configsync.restd.drain import DrainedRestart, RestartOutcome, Stop, request_restart
from sidecars.configsync.restd.turns import Turns
from sidecars.configsync.service.installing import Installer
from sidecars.configsync.settings import Settings
from sidecars.protocol.configsync import ConfigOutcome
from sidecars.runtime import offloop
from sidecars.slurm import SlurmClient, daemons

log = structlog.get_logger(__name__)

STAGED_MODE = 0o400  # slurmrestd's user reads; nobody writes a staged file in place (a swap replaces it)


def staged_mode(_: FileEntry) -> int:
    return STAGED_MODE


def staged_target(settings: Settings, checkpoint: Callable[[str], None] | None = None) -> Target:
    """The directory slurmrestd reads, its files staged 0400 for slurmrestd's user (when config-sync
    runs as root; else they are config-sync's own, which is slurmrestd's user in its pod)."""
    owner = settings.restd.uid if settings.restd.uid is not None and os.geteuid() == 0 else None
    return Target(settings.target, checkpoint, mode=staged_mode, owner=owner)


@dataclass
class RestdStrategy:
    """slurmrestd's read, judge and apply (service/strategy.py), on the service's installer."""

    installer: Installer
    settings: Settings
    client: SlurmClient
    stop: Stop | None = None  # how slurmrestd is asked to restart (tests: their own)
    turns: Turns | None = None  # None: no turns (one replica, or no Kubernetes): it drains when it likes
    daemon: str = daemons.SLURMRESTD
    last_restart: RestartOutcome | None = None
    # Validator's checks that concern a client of slurmctld, and slurmrestd's own: no dry run
    validator: Judge = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.validator = RestdValidator.from_settings(replace(s, dry_run=False), self.client)
        self.drainer = DrainedRestart(
            replace(s.restd, restart_timeout_seconds=s.restart_timeout_seconds),
            stop=self.stop or request_restart,
            on_change=self.installer.report.notify,
        )

    def read(self, files: FileSet) -> FileSet:
        return files

    def status(self) -> dict[str, Any]:
        last = self.last_restart
        return {
            "daemon": self.daemon,
            "restd": {
                "serving": self.drainer.serving,
                "why": self.drainer.why,
                "waiting_on_connections": self.drainer.waiting_on,
                "last_restart": None
                if last is None
                else {"ok": last.ok, "cut": last.cut, "drained_seconds": round(last.drained_seconds, 3)},
                "turn": None if self.turns is None else self.turns.view(),
            },
        }

    async def _listening(self) -> bool:
        state = await offloop.whole(inflight.read, self.drainer.settings.port, self.drainer.settings.tables)
        return state.listener is not None

    async def judge(
        self, files: FileSet, current: FileSet | None, seen: float, *, startup: bool
    ) -> Verdict | None:
        do = self.installer
        do.state.pending = True
        await do.report.notify()
        verdict = await self.validator.validate(files, current)
        if not verdict.ok:
            await do.reject(files, verdict.reason, ConfigOutcome.REJECTED, seen)
            return None
        if current is None or do.state.applied is None or (startup and not await self._listening()):
            await do.install(files, seen, reason="slurmrestd is not running yet: it starts on this set")
            return None
        # under --restart-policy hold, the drained restart waits as slurmctld's and slurmdbd's do
        if await do.held(Change(files, verdict, self.settings, self.client, self.daemon, False), seen):
            return None
        return verdict

    async def apply(self, files: FileSet, current: FileSet, verdict: Verdict, seen: float) -> None:
        if self.turns is None:
            await self._drained_apply(files, seen)
            return
        # the replicas drain one at a time: until this one's turn, the change stays pending (the
        # holder named in /status); the turn is handed back once the pod has been ready again for
        # as long as the Service takes to put it back among its endpoints
        async with self.turns.turn(self.installer.report.notify):
            await self._drained_apply(files, seen)
            await asyncio.sleep(self.drainer.settings.settle_seconds)

    async def _drained_apply(self, files: FileSet, seen: float) -> None:
        # unverified until a new slurmrestd listens on it; a config-sync that dies meanwhile puts it back
        async with self.installer.unverified(files) as generation:
            outcome = await self.drainer.restart()
        self.last_restart = outcome
        if outcome.ok and await self.installer.verified():
            cut = f", {outcome.cut} connections cut" if outcome.cut else ", no connection cut"
            await self.installer.keep(
                files,
                generation,
                seen=seen,
                reason=outcome.reason,
                message=f"generation {generation} ({files.short}) applied by a drained restart of "
                f"slurmrestd after {outcome.drained_seconds:.1f}s{cut}",
            )
            return
        self.installer.back_to_good()
        back = await self.drainer.restart()  # once more, on the good set
        reason = outcome.reason + (
            "; the previous set is back and slurmrestd listens on it"
            if back.ok
            else f"; the previous set is back, but slurmrestd does not listen on it either: {back.reason}"
        )
        log.warning("slurmrestd_set_rolled_back", reason=reason)
        await self.installer.rolled_back(files, reason, seen)
