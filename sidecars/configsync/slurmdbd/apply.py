"""Applying a new slurmdbd.conf that is already on disk, and telling whether slurmdbd took it.

A change of the keys slurmdbd re-reads (dbdconf.RELOADABLE) is a `sacctmgr reconfigure`; any other
is a restart: slurmdbd reads its storage, address and authentication settings only at start. The
restart is the deployment's: slurmdbd is stopped (`sacctmgr shutdown`; when it no longer answers, a
stop request its container's command watches for, in a directory both containers mount: the pod
shares no process namespace with the third-party slurmdbd image), and its container runtime starts
it again on whatever file is in place. Either way the change counts only once slurmdbd answers
(`sacctmgr ping`, or a round trip on 22.05, which has no ping); accounting records wait in
slurmctld's queue meanwhile, so a short outage loses none.

When slurmdbd does not come back, the database is asked whether it is there (its server speaks
first on connect: the greeting is read, no login is tried). A database that does not answer at the
address the previous file names too is not this change's fault: rolling back would not bring
slurmdbd back, so the change is kept and waited on, said once (log, Event), until the database is
back; then slurmdbd, which retries it every 5 s by itself, must answer within the restart timeout
or the change is rolled back after all. Each such probe is one connection that ends before any
login: MariaDB counts it towards the host's max_connect_errors, which the next successful login of
slurmdbd resets.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from sidecars.configsync.fileset.dbdconf import Endpoint
from sidecars.configsync.slurmdbd.startlog import StartLog
from sidecars.slurm import SlurmClient, SlurmError, SlurmTimeout, daemons

log = structlog.get_logger(__name__)

Stop = Callable[[], Awaitable[None]]
Instance = Callable[[], object | None]  # which slurmdbd runs now (None: cannot be told from here)
DEFAULT_PID_FILE = Path("/run/slurmdbd.pid")  # slurmdbd's own default (PidFile)
# the file whose appearance tells slurmdbd's container to stop it (manifests/overlays/accounting:
# its command removes it, SIGTERMs slurmdbd and exits; the kubelet starts the container again)
STOP_REQUEST = Path("/run/slurmdbd-control/stop")
GREETING_SECONDS = 3.0


@dataclass(frozen=True, slots=True)
class DbdOutcome:
    ok: bool
    reason: str
    restarted: bool = False  # slurmdbd was stopped: it runs (or will) on whatever file is in place


async def database_answers(endpoint: Endpoint) -> bool | None:
    """Whether a MySQL or MariaDB server greets at `endpoint`; None when that cannot be told from
    here (StorageHost=localhost: the client library then uses a Unix socket, not TCP)."""
    if endpoint.host == "localhost":
        return None
    try:
        async with asyncio.timeout(GREETING_SECONDS):
            reader, writer = await asyncio.open_connection(endpoint.host, endpoint.port)
            try:
                first = await reader.read(4)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError):
        return False
    return bool(first)


def pid_file_instance(pid_file: Path) -> tuple[int, int, bytes] | None:
    """Which slurmdbd runs, as its PidFile tells (written anew by each start): None when the file
    is not there or not readable from here (another container's /run)."""
    try:
        with pid_file.open("rb") as f:
            st = os.fstat(f.fileno())
            return (st.st_ino, st.st_mtime_ns, f.read(64))
    except OSError:
        return None


async def stop_slurmdbd(client: SlurmClient, pid_file: Path, request: Path = STOP_REQUEST) -> None:
    """The deployment's stop: `sacctmgr shutdown` while slurmdbd answers (it finishes what it was
    writing); else, for a slurmdbd that waits on a database it cannot reach (it answers nothing
    then), a stop request for its container's command, and SIGTERM to the pid its PidFile names only
    where that pid is a slurmdbd we can see (a host or a dev cluster, not a pod: its pids are another
    namespace's, and that number here may be anything, config-sync itself included)."""
    if await client.accounting_ping():
        await client.shutdown_accounting()
        return
    asked = request_stop(request)
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pid = 0
    if pid > 1 and _is_slurmdbd(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    elif not asked:
        log.warning("slurmdbd_cannot_be_stopped", pid_file=str(pid_file), request=str(request))


def request_stop(request: Path) -> bool:
    """Leave the stop request (written whole, then renamed into place); False when its directory
    is not there (no container watches for it)."""
    if not request.parent.is_dir():
        return False
    part = request.with_name(f".{request.name}.{os.getpid()}")
    try:
        part.write_text(f"stop requested by config-sync at {time.time():.0f}\n")
        part.replace(request)
    except OSError as exc:
        log.warning("slurmdbd_stop_request_failed", request=str(request), error=exc.strerror)
        part.unlink(missing_ok=True)
        return False
    log.info("slurmdbd_stop_requested", request=str(request))
    return True


def _is_slurmdbd(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == daemons.SLURMDBD
    except OSError:
        return False


class DbdApplier:
    def __init__(
        self,
        client: SlurmClient,
        *,
        stop: Stop,
        restart_timeout_seconds: float,
        settle_seconds: float,
        on_waiting: Callable[[str], Awaitable[None]],
        instance: Instance = lambda: None,
        start_log: StartLog | None = None,
        poll_seconds: float = 0.2,
        database_poll_seconds: float = 5.0,
    ) -> None:
        self.client = client
        self.stop = stop
        self.restart_timeout_seconds = restart_timeout_seconds
        self.settle_seconds = settle_seconds
        self.on_waiting = on_waiting
        self.instance = instance
        self.start_log = start_log or StartLog()
        self.poll_seconds = poll_seconds
        self.database_poll_seconds = database_poll_seconds

    async def _answers(self) -> bool | None:
        """One `sacctmgr ping`: None when the ping itself got no answer in time (a loaded machine, a
        slurmdbd starting): that tells neither way, so the caller polls again."""
        try:
            return await self.client.accounting_ping(timeout=5.0)
        except SlurmError as exc:
            log.info("slurmdbd_ping_unanswered", error=exc.message)
            return None

    async def _until(self, up: bool, seconds: float) -> bool:
        """Poll until slurmdbd answers (`up`) or does not (`not up`); False when `seconds` ran out."""
        deadline = time.monotonic() + seconds
        while await self._answers() is not up:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(self.poll_seconds)
        return True

    async def _started(self, seconds: float) -> bool | str:
        """Until the restarted slurmdbd answers (True); its own words when its log says it refused
        to run on the file (a refused password, a fatal: waiting cannot change that, startlog.py);
        False when `seconds` ran out."""
        deadline = time.monotonic() + seconds
        while True:
            # a log flooded by a slurmdbd that fails: up to 256 KiB a poll, read off the loop
            if (refused := await asyncio.to_thread(self.start_log.refusal)) is not None:
                return refused
            if await self._answers():
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(self.poll_seconds)

    async def _stopped(self, before: object | None, seconds: float) -> bool:
        """Until the slurmdbd that ran before the stop is gone: it no longer answers, or another one
        was started since (its PidFile written anew). Silence alone can be missed: a container
        runtime restarts it within a second, and under load one `sacctmgr ping` takes longer than
        that, so every ping would find a slurmdbd up, the new one. False when `seconds` ran out."""
        deadline = time.monotonic() + seconds
        while True:
            if before is not None and self.instance() != before:
                return True
            if await self._answers() is False:
                return True
            if before is not None and self.instance() != before:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(self.poll_seconds)

    async def _settled(self) -> bool:
        """Still answering `settle_seconds` later (a daemon that died of the file answers no more).
        A ping that gets no answer in time tells neither way: asked again, within the restart timeout."""
        await asyncio.sleep(self.settle_seconds)
        deadline = time.monotonic() + self.restart_timeout_seconds
        while (up := await self._answers()) is None and time.monotonic() < deadline:
            await asyncio.sleep(self.poll_seconds)
        return bool(up)

    async def _reconfigure(self) -> str | None:
        """`sacctmgr reconfigure`, given a restart's time to answer: None once slurmdbd answered it,
        else why not. Raises SlurmError when slurmdbd refused it."""
        try:
            await self.client.reconfigure_accounting(timeout=self.restart_timeout_seconds)
        except SlurmTimeout as exc:
            log.warning("slurmdbd_reconfigure_answer_late", error=exc.message)
            return exc.message
        return None

    async def reload(self) -> DbdOutcome:
        """`sacctmgr reconfigure`: slurmdbd re-reads its file in place.

        A late answer is no refusal, and no success either: slurmdbd may have re-read the file or
        never heard of the request, and what it shows of its settings cannot tell (some reloadable
        keys it does not show, the others in its own formats). So it is asked again once it answers:
        a re-read of the file in place is harmless twice, and an answered one is a fact."""
        t = self.restart_timeout_seconds
        try:
            late = await self._reconfigure()
            if late is not None:
                if not await self._until(True, t):
                    why = f"sacctmgr reconfigure: {late}; slurmdbd did not answer within {t:g}s"
                    return DbdOutcome(False, why)
                again = await self._reconfigure()
                if again is not None:
                    return DbdOutcome(False, f"sacctmgr reconfigure, asked twice: {late}; {again}")
        except SlurmError as exc:
            return DbdOutcome(False, f"sacctmgr reconfigure failed: {exc.message}")
        if await self._settled():
            return DbdOutcome(True, "slurmdbd re-read the file and answers")
        return DbdOutcome(
            False, f"slurmdbd stopped answering within {self.settle_seconds:g}s of re-reading it"
        )

    async def restart(self, new: Endpoint, old: Endpoint | None) -> DbdOutcome:
        """Stop slurmdbd, wait for it to be started again on the file in place and to answer."""
        t = self.restart_timeout_seconds
        before = self.instance()
        try:
            await self.stop()
        except SlurmTimeout as exc:
            # a late answer is no refusal: slurmdbd may be stopping already, and whether it is
            # gone (silent, or another one started) is what decides below, never a guess
            log.warning("slurmdbd_shutdown_answer_late", error=exc.message)
        except SlurmError as exc:
            return DbdOutcome(False, f"slurmdbd could not be stopped: {exc.message}")
        if not await self._stopped(before, t):
            return DbdOutcome(False, f"slurmdbd still answered {t:g}s after it was told to stop")
        self.start_log.mark()  # what the next slurmdbd says, not the last one's words
        started = await self._started(t)
        if started is True and await self._settled():
            return DbdOutcome(True, "slurmdbd restarted on it and answers", restarted=True)
        if isinstance(started, str):
            log.warning("slurmdbd_refused_to_start", said=started)
            why = f"slurmdbd did not answer after its restart: it refused to run on it ({started})"
        else:
            why = f"slurmdbd did not answer within {t:g}s of its restart"
        db = await database_answers(new)
        if db is False and new == old:
            await self.on_waiting(
                f"{why}, and its database at {new} does not answer either: the change is kept and "
                "waits for the database (the previous file names the same one, so a rollback would not help)"
            )
            while await database_answers(new) is False:
                await asyncio.sleep(self.database_poll_seconds)
            if await self._until(True, t) and await self._settled():
                return DbdOutcome(True, "slurmdbd answers on it since its database came back", restarted=True)
            why += f"; its database came back, and slurmdbd did not answer within {t:g}s of that"
        elif db is False:
            why += f"; nothing answers at the database address it names ({new})"
        elif db is None:
            why += "; whether its database answers cannot be told from here (StorageHost=localhost)"
        else:
            why += f"; its database at {new} answers"
        return DbdOutcome(False, why, restarted=True)
