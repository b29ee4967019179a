"""Applying a new slurmdbd.conf: slurmdbd reads its storage, address and authentication settings only
at start (dbdconf.RELOADABLE is the exception), so a change is a restart, verified by slurmdbd
answering (`sacctmgr ping`, or a round trip on 22.05). When it does not come back in time, the
previous file goes back and slurmdbd is restarted on it: accounting records wait in slurmctld's
queue meanwhile (it holds them while slurmdbd is away), so a short outage loses none.

The restart itself is the deployment's: by default `sacctmgr shutdown`, after which the container
runtime starts slurmdbd again on whatever file is in place; `restart` returns once the old daemon
is gone.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from sidecars.configsync.dbdconf import CONF_NAME
from sidecars.slurm import SlurmClient

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class DbdOutcome:
    applied: bool
    reason: str
    rolled_back: bool = False


def write_conf(path: Path, data: bytes) -> None:
    """Replace the file in one rename, 0600 from its first byte (it holds StoragePass)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class DbdApplier:
    def __init__(
        self,
        path: Path,
        client: SlurmClient,
        *,
        restart: Callable[[], Awaitable[None]],
        restart_timeout_seconds: float,
    ) -> None:
        self.path = path
        self.client = client
        self.restart = restart
        self.restart_timeout_seconds = restart_timeout_seconds

    async def _back(self) -> bool:
        deadline = time.monotonic() + self.restart_timeout_seconds
        while not await self.client.accounting_ping(timeout=5.0):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.2)
        return True

    async def apply(self, new: bytes) -> DbdOutcome:
        """Put `new` in place, restart slurmdbd and verify it answers; else roll back."""
        old = self.path.read_bytes()
        write_conf(self.path, new)
        await self.restart()
        if await self._back():
            log.info("slurmdbd_conf_applied", file=CONF_NAME)
            return DbdOutcome(True, "slurmdbd restarted on the new file and answers")
        why = f"slurmdbd did not answer within {self.restart_timeout_seconds:g}s of its restart"
        log.warning("slurmdbd_conf_rolling_back", file=CONF_NAME, reason=why)
        write_conf(self.path, old)
        await self.restart()
        if await self._back():
            return DbdOutcome(False, f"{why}; the previous file is back and slurmdbd answers", True)
        return DbdOutcome(False, f"{why}; it did not answer on the previous file either", True)
