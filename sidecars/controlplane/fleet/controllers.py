"""Which slurmctld is in control, with several (`SlurmctldHost` more than once): asked every
interval, shown in `/status` and the metrics; a takeover is counted once and told in one Event.

Every replica asks (each one's commands follow the primary, `slurm.primary`) and counts what it saw;
only the Lease holder writes the Event. A replica that saw a takeover while following keeps it for
`hold_seconds` and writes it when it becomes the holder within them: the replica that held the Lease
may have been in the pod lost with the old primary, and then it told no one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import structlog

from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.protocol.events import EventReason, Reason
from sidecars.runtime.events import EventType
from sidecars.slurm import SlurmClient, SlurmError, Takeover

log = structlog.get_logger(__name__)

Emit = Callable[[Reason, str, EventType], Awaitable[None]]  # reason, message, type


@dataclass(eq=False)
class ControllerWatch:
    client: SlurmClient
    metrics: ControlPlaneMetrics
    _: KW_ONLY
    may_write: Callable[[], bool]
    hold_seconds: float
    emit: Emit | None = None
    _counted: int = field(default=0, init=False)  # the controllers' takeovers already counted here
    _counted_by: dict[str, int] = field(default_factory=dict, init=False)  # and by the host that took control
    _untold: Takeover | None = field(default=None, init=False)
    error: str | None = field(default=None, init=False)

    @property
    def several(self) -> bool:
        ctl = self.client.controllers
        return ctl is not None and len(ctl.hosts()) > 1

    async def check(self) -> None:
        """Ask who is in control now; count, and tell, a move not told yet."""
        ctl = self.client.controllers
        if ctl is None or not self.several:
            return
        try:
            await self.client.follow()
            self.error = None
        except SlurmError as exc:
            self.error = exc.message
            log.warning("slurmctld_ping_failed", error=exc.message)
        for host, role in ctl.roles.items():
            self.metrics.slurmctld_primary.labels(host).set(1 if role == "in control" else 0)
        # also the moves a command's own re-learning found between two checks
        # each move counted for the host it went to, even two between checks (there and back)
        for host, n in ctl.taken_by.items():
            if n > self._counted_by.get(host, 0):
                self.metrics.slurmctld_takeovers.labels(host).inc(n - self._counted_by.get(host, 0))
                self._counted_by[host] = n
        if ctl.takeovers > self._counted and ctl.last is not None:
            self._counted = ctl.takeovers
            self._untold = ctl.last
        await self._tell()

    async def _tell(self) -> None:
        moved = self._untold
        if moved is None:
            return
        if time.time() - moved.at > self.hold_seconds:
            self._untold = None  # the holder of that time told it, or no one can say it now
            return
        if not self.may_write() or self.emit is None:
            return
        self._untold = None
        message = f"slurmctld {moved.primary} took control from {moved.previous}"
        try:
            await self.emit(EventReason.SLURMCTLD_TAKEOVER, message, "Warning")
        except Exception as exc:  # an Event is a report: a failed one must not stop the watch
            log.warning("takeover_event_failed", error=str(exc))

    async def run(self, interval_seconds: float) -> None:
        """Check every interval, forever."""
        while True:
            await self.check()
            await asyncio.sleep(interval_seconds)

    def status(self) -> dict[str, Any] | None:
        """`/status`'s `slurmctld` (None with one controller)."""
        ctl = self.client.controllers
        if ctl is None or not self.several:
            return None
        return {**ctl.as_json(), "error": self.error}
