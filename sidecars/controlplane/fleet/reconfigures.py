"""A reconfigure seen as soon as it happens, so that the writers re-assert what they own at once.

`scontrol reconfigure` loses node state set at run time (docs/node-state.md): the topology our
topology sync places in place, features, Weight, an admin's DOWN. The writers put theirs back when
a fleet read shows it gone, and the fleet is read every `--interval-seconds` (4 s). From 23.11 a
reconfigure starts a new slurmctld, whose BOOT_TIME (`scontrol show config`) is the reconfigure's
second (measured on 26.05; 22.05 reconfigures in place and keeps it): asked every
`--reconfigure-poll-seconds`, a new one asks for a fleet read now, and the writers run after it.
The fleet is then read at the fast interval until the next regular read would have come: the new
slurmctld may not answer the first read, and a writer may skip a round (a lapsed Lease under load).
A reconfigure by anyone (config-sync, an admin, a restarted controller) is seen the same way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog

from sidecars.slurm import SlurmClient, SlurmError

log = structlog.get_logger(__name__)


class ReconfigureWatch:
    def __init__(self, client: SlurmClient, *, seconds: float, on_seen: Callable[[], None]) -> None:
        self._client = client
        self._seconds = seconds
        self._on_seen = on_seen
        self.booted: str | None = None  # slurmctld's BOOT_TIME as last read; None before a read
        self.seen = 0  # how many new BOOT_TIMEs were seen (the first read is not one)
        self.seen_at: float | None = None  # monotonic, the last one

    async def check(self) -> bool:
        """Read BOOT_TIME once; True (and the callback called) when it moved since the last read."""
        try:
            booted = (await self._client.boot_time()).booted  # the client's timeout: a loaded one is slow
        except SlurmError:
            return False  # unanswered now: the next read that answers compares with the last one
        moved = booted is not None and self.booted is not None and booted != self.booted
        if booted is not None:
            self.booted = booted
        if moved:
            self.seen += 1
            self.seen_at = time.monotonic()
            log.info("slurmctld_reconfigure_seen", booted=booted)
            self._on_seen()
        return moved

    def recent(self, seconds: float) -> bool:
        """Whether a reconfigure was seen within the last `seconds`."""
        return self.seen_at is not None and time.monotonic() - self.seen_at < seconds

    async def run(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self._seconds)

    def status(self) -> dict[str, Any]:
        return {"booted": self.booted, "seen": self.seen, "poll_seconds": self._seconds}
