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
from dataclasses import replace
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from sidecars.configsync.fileset.sources import FileEntry, FileSet
from sidecars.configsync.fileset.stage import Applied, Target
from sidecars.configsync.holds.rule import Change
from sidecars.configsync.report.record import now_rfc3339
from sidecars.configsync.restd import inflight
from sidecars.configsync.restd.check import RestdValidator
from sidecars.configsync.restd.drain import DrainedRestart, RestartOutcome, Stop, request_restart
from sidecars.configsync.restd.turns import Turns
from sidecars.configsync.service.daemon import ConfigSync
from sidecars.configsync.settings import Settings
from sidecars.protocol.configsync import ConfigOutcome
from sidecars.runtime import offloop
from sidecars.runtime.events import EventSink
from sidecars.slurm import SlurmClient, daemons

log = structlog.get_logger(__name__)

STAGED_MODE = 0o400  # slurmrestd's user reads; nobody writes a staged file in place (a swap replaces it)


def staged_mode(_: FileEntry) -> int:
    return STAGED_MODE


class RestdSync(ConfigSync):
    def __init__(
        self,
        settings: Settings,
        client: SlurmClient,
        registry: CollectorRegistry,
        events: EventSink,
        *,
        stop: Stop | None = None,
        checkpoint: Callable[[str], None] | None = None,
        turns: Turns | None = None,
    ) -> None:
        validator = RestdValidator(
            client,
            settings.conf_dir,
            settings.state_dir,
            main=settings.main_file,
            max_bytes=settings.max_file_bytes,
            parse_timeout=settings.parse_timeout_seconds,
            sources=settings.sources,
        )
        super().__init__(settings, client, registry, events, validator=validator, checkpoint=checkpoint)
        owner = settings.restd.uid if settings.restd.uid is not None and os.geteuid() == 0 else None
        self.installer.target = Target(settings.target, checkpoint, mode=staged_mode, owner=owner)
        self.drainer = DrainedRestart(
            replace(settings.restd, restart_timeout_seconds=settings.restart_timeout_seconds),
            stop=stop or request_restart,
            on_change=self.reporter.notify,
        )
        self.last_restart: RestartOutcome | None = None
        self.turns = turns  # None: no turns (one replica, or no Kubernetes): it drains when it likes
        self.reporter.extra = self._status

    def _status(self) -> dict[str, Any]:
        last = self.last_restart
        return {
            "daemon": daemons.SLURMRESTD,
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

    async def _judge(self, files: FileSet, current: FileSet | None, seen: float, *, startup: bool) -> None:
        self.state.pending = True
        await self.reporter.notify()
        verdict = await self.validator.validate(files, current)
        if not verdict.ok:
            await self.installer.reject(files, verdict.reason, ConfigOutcome.REJECTED, seen)
            return
        if current is None or self.applied is None or (startup and not await self._listening()):
            await self.installer.install(
                files, seen, reason="slurmrestd is not running yet: it starts on this set"
            )
            return
        # under --restart-policy hold, the drained restart waits as slurmctld's and slurmdbd's do
        if await self.installer.held(
            Change(files, verdict, self.settings, self.client, daemons.SLURMRESTD, False), seen
        ):
            return
        if self.turns is None:
            await self._drained_apply(files, seen)
            return
        # the replicas drain one at a time: until this one's turn, the change stays pending (the
        # holder named in /status); the turn is handed back once the pod has been ready again for
        # as long as the Service takes to put it back among its endpoints
        async with self.turns.turn(self.reporter.notify):
            await self._drained_apply(files, seen)
            await asyncio.sleep(self.drainer.settings.settle_seconds)

    async def _drained_apply(self, files: FileSet, seen: float) -> None:
        assert self.applied is not None
        generation = self.applied.generation + 1
        # unverified until a new slurmrestd listens on it; a config-sync that dies meanwhile puts it back
        self.target.swap(files, generation, unverified=True)
        try:
            outcome = await self.drainer.restart()
        except BaseException:
            self.installer.back_to_good()
            raise
        self.last_restart = outcome
        if outcome.ok and self.target.verified():
            previous, self.state.applied = self.applied, Applied(generation, now_rfc3339(), files)
            self.lkg.save(self.state.applied)
            self.state.rejected = None
            self.state.pending = False
            self.state.backoff = 0.0
            cut = f", {outcome.cut} connections cut" if outcome.cut else ", no connection cut"
            await self.record.applied(
                self.state.applied,
                previous,
                seen=seen,
                reason=outcome.reason,
                message=f"generation {generation} ({files.short}) applied by a drained restart of "
                f"slurmrestd after {outcome.drained_seconds:.1f}s{cut}",
            )
            await self.reporter.notify()
            return
        self.installer.back_to_good()
        back = await self.drainer.restart()  # once more, on the good set
        reason = outcome.reason + (
            "; the previous set is back and slurmrestd listens on it"
            if back.ok
            else f"; the previous set is back, but slurmrestd does not listen on it either: {back.reason}"
        )
        log.warning("slurmrestd_set_rolled_back", reason=reason)
        await self.installer.reject(files, reason, ConfigOutcome.ROLLED_BACK, seen)
