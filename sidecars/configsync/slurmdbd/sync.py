"""config-sync for slurmdbd (`config-sync --daemon slurmdbd`): slurmdbd.conf from its Secret into the
directory slurmdbd reads, judged without the database (slurmdbd/check.py), then applied as slurmdbd takes
it: `sacctmgr reconfigure` for the keys it re-reads, a restart for any other (held instead under
`--restart-policy hold`, as slurmctld's restarts are), verified by slurmdbd answering, and rolled
back when it does not (slurmdbd/apply.py).

The rest is config-sync's own: the sources read and hashed, the atomic swap with its unverified
marker, the last known good set under --state-dir, history, metrics, Events, /status. slurmdbd's
container runs no config-guard: a restart is how a change is applied, so the marker is resolved by
config-sync itself (at its start, a set left unverified goes back to the good one).

When slurmdbd does not answer before a change: at config-sync's own start (the pod's, where slurmdbd
waits for config-sync to be ready) the set is installed and slurmdbd starts on it; later, if its
database does not answer either, the change waits (pending, retried with a backoff) rather than be
judged against a database that is away; if the database answers, slurmdbd is down on its own
account and the change is applied the same way, so that a fix can reach a slurmdbd that cannot start.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from sidecars.configsync.fileset import dbdconf
from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.holds import Change
from sidecars.configsync.judge.validate import Judge, Verdict
from sidecars.configsync.service.installing import Installer
from sidecars.configsync.settings import Settings
from sidecars.configsync.slurmdbd.apply import (
    DEFAULT_PID_FILE,
    DbdApplier,
    DbdOutcome,
    Stop,
    database_answers,
    pid_file_instance,
    stop_slurmdbd,
)
from sidecars.configsync.slurmdbd.check import DbdValidator
from sidecars.protocol.configsync import ConfigOutcome
from sidecars.protocol.events import EventReason
from sidecars.slurm import SlurmClient, daemons

log = structlog.get_logger(__name__)


def _endpoint(files: FileSet | None) -> dbdconf.Endpoint | None:
    entry = files.files.get(dbdconf.CONF_NAME) if files is not None else None
    return dbdconf.storage_endpoint(entry.data) if entry is not None else None


def owner_only(files: FileSet, secret_sources: frozenset[Path]) -> FileSet:
    """The files of a Secret volume as they are staged: for their owner alone. The kubelet gives a
    Secret's files the pod's fsGroup and group read (defaultMode 0400 becomes 0440), which the
    sidecar needs to read them as SlurmUser; slurmdbd needs its file 0600 and would refuse that
    mode. A file from a ConfigMap keeps its mode, and is refused for it (dbdconf.check)."""
    entries = [
        replace(e, mode=e.mode & 0o700) if e.source in secret_sources else e for e in files.files.values()
    ]
    return FileSet.build(entries, files.problems)


def _named(files: FileSet | None, key: str) -> str | None:
    entry = files.files.get(dbdconf.CONF_NAME) if files is not None else None
    return dbdconf.parse(entry.data.decode("utf-8", "replace")).options.get(key) if entry else None


def _pid_file(files: FileSet | None) -> Path:
    named = _named(files, "pidfile")
    return Path(named) if named else DEFAULT_PID_FILE


def _log_file(files: FileSet | None) -> Path | None:
    """slurmdbd's LogFile as the verified set names it (an absolute path; none: it logs to stderr)."""
    named = _named(files, "logfile")
    return Path(named) if named and named.startswith("/") else None


@dataclass
class DbdStrategy:
    """slurmdbd's read, judge and apply (service/strategy.py), on the service's installer."""

    installer: Installer
    settings: Settings
    client: SlurmClient
    stop: Stop | None = None  # how slurmdbd is stopped for a restart (tests: their own)
    daemon: str = daemons.SLURMDBD
    waiting_for_database: str | None = None  # what was said while a change waits for it
    validator: Judge = field(init=False)  # slurmdbd's own: no dry run of slurmctld's (check.py)

    def __post_init__(self) -> None:
        self.validator = DbdValidator(self.client, self.settings)
        s = self.settings
        self.dbd = DbdApplier(
            self.client,
            stop=self.stop or self._stop,
            restart_timeout_seconds=s.restart_timeout_seconds,
            settle_seconds=s.settle_seconds,
            on_waiting=self._waiting,
            instance=lambda: pid_file_instance(_pid_file(self.installer.state.applied_files)),
        )

    async def _stop(self) -> None:
        # the PidFile the running slurmdbd was started with: the applied set's
        await stop_slurmdbd(self.client, _pid_file(self.installer.state.applied_files))

    def read(self, files: FileSet) -> FileSet:
        return owner_only(files, frozenset(self.settings.secret_sources))

    def status(self) -> dict[str, Any]:
        return {"daemon": self.daemon, "waiting_for_database": self.waiting_for_database}

    async def _waiting(self, why: str) -> None:
        self.waiting_for_database = why
        log.warning("slurmdbd_waits_for_its_database", reason=why)
        await self.installer.report.record.events.emit(EventReason.CONFIG_WAITS_FOR_DATABASE, why, "Warning")
        await self.installer.report.notify()

    async def judge(
        self, files: FileSet, current: FileSet | None, seen: float, *, startup: bool
    ) -> Verdict | None:
        do, st = self.installer, self.installer.state
        st.pending = True
        # said again only by the branch that still waits: any other outcome ends the wait
        waiting, self.waiting_for_database = self.waiting_for_database, None
        await do.report.notify()
        verdict = await self.validator.validate(files, current)
        if not verdict.ok:
            await do.reject(files, verdict.reason, ConfigOutcome.REJECTED, seen)
            return None
        if current is None:
            # nothing staged yet: slurmdbd (re)starts on this set (its container waits for config-sync)
            await do.install(files, seen, reason="nothing was staged before: slurmdbd starts on this set")
            return None
        answering = await self.client.accounting_ping()
        if startup and not answering:
            # the pod's start: slurmdbd waits for config-sync to be ready, so it starts on this set
            await do.install(files, seen, reason="slurmdbd is not running yet: it starts on this set")
            return None
        if await do.held(Change(files, verdict, self.settings, self.client, self.daemon, False), seen):
            return None
        live = _endpoint(current)
        if not answering and live and await database_answers(live) is False:
            # nothing to verify against: the change waits for them, judged again at every retry
            st.back_off(self.settings.retry_max_seconds)
            if waiting is None:
                await self._waiting(
                    f"slurmdbd and its database at {live} do not answer: the change waits for them"
                )
            else:
                self.waiting_for_database = waiting
            return None
        return verdict

    async def apply(self, files: FileSet, current: FileSet, verdict: Verdict, seen: float) -> None:
        new, old = _endpoint(files), _endpoint(current)
        assert new is not None
        # slurmdbd's own words when it will not start, where its log is readable from here: the
        # verified set's LogFile, as slurmctld's is read (a candidate's path is not trusted yet)
        self.dbd.start_log.path = _log_file(current)
        # unverified until slurmdbd answers on it; a config-sync that dies meanwhile puts it back at start
        try:
            async with self.installer.unverified(files) as generation:
                if verdict.restart_required:
                    log.info("restarting_slurmdbd", reasons=[str(r) for r in verdict.restart])
                    outcome = await self.dbd.restart(new, old)
                else:
                    outcome = await self.dbd.reload()
        finally:
            self.waiting_for_database = None
        if outcome.ok and await self.installer.verified():
            how = "by restarting slurmdbd" if verdict.restart_required else "by sacctmgr reconfigure"
            await self.installer.keep(
                files,
                generation,
                seen=seen,
                reason=outcome.reason,
                message=f"generation {generation} ({files.short}) applied {how}: {outcome.reason}",
            )
            return
        await self._roll_back(files, outcome, old, seen)

    async def _roll_back(
        self, files: FileSet, outcome: DbdOutcome, old: dbdconf.Endpoint | None, seen: float
    ) -> None:
        self.installer.back_to_good()
        reason = outcome.reason
        assert old is not None  # the applied set was judged: it has its slurmdbd.conf
        if outcome.restarted or not await self.client.accounting_ping():
            # slurmdbd was restarted on the new file (or died of it): once more, on the good one
            back = await self.dbd.restart(old, old)
        else:
            back = await self.dbd.reload()  # it may have re-read the new file: the good one again
        reason += (
            "; the previous file is back and slurmdbd answers"
            if back.ok
            else f"; the previous file is back, but slurmdbd does not answer on it either: {back.reason}"
        )
        log.warning("slurmdbd_conf_rolled_back", reason=reason)
        await self.installer.rolled_back(files, reason, seen)
