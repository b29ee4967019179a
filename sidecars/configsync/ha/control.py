"""HA controllers: never without a controller in control.

Slurm keeps one controller in control, but not always: with the primary down, a backup in control
whose reconfigure fails (24.11: "Resuming operation, reconfigure failed") went back to standby and
stayed there for about 90 s, the primary still down, nobody serving. Slurm's own takeover does not
come: the backup had taken control once, and waits on a primary that is not there.

So each config-sync with peers watches for "no controller in control" (its own controller asked
alone, its peers' answers) and, when it lasts, the one pod that can end it acts: its controller is
up in standby, and no controller listed before it in `SlurmctldHost` is up (that one, a primary
back, is the one Slurm hands control to). Every other controller is asked alone first (Slurm's view,
not a peer's word). It puts the last good set back in its directory (a standby reads it when it
takes control) and runs `scontrol takeover <its index>`, then says so in an Event and in /status.

When to act: at once (ACT_AFTER_SECONDS) when this pod's own controller was in control and let go
with no other taking it, since then nothing in Slurm will take it; otherwise only once no controller
was in control for SlurmctldTimeout and a margin, when Slurm's own takeover should have come: a
primary cut off for a moment is never taken over earlier than Slurm itself would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from sidecars.configsync.ha.coordination import ASK_SECONDS, Coordination
from sidecars.protocol.configsync import HaRole
from sidecars.protocol.events import EventReason
from sidecars.runtime.events import EventSink
from sidecars.slurm.standby import ask_alone, ask_takeover, conf_path, host_names

log = structlog.get_logger(__name__)

__all__ = ["Keeper"]

ACT_AFTER_SECONDS = 1.0  # this pod's controller let go with none other in control: act this soon
WATCH_AFTER_CHANGE_SECONDS = 60.0  # after an apply, ask often: a failed reconfigure drops control
EVENT = EventReason.SLURMCTLD_NO_CONTROLLER


def _rfc3339(monotonic: float) -> str:
    at = datetime.now(UTC) - timedelta(seconds=time.monotonic() - monotonic)
    return at.isoformat(timespec="seconds").replace("+00:00", "Z")


class Keeper:
    """Watches for no controller in control, and has this pod's controller take control when it must."""

    def __init__(self, ha: Coordination, events: EventSink) -> None:
        self.ha = ha
        self.events = events
        self.last_in_control = time.monotonic()
        self.since: float | None = None  # no controller in control since (as asked), None: one is
        self.ours_let_go = False  # this pod's controller was in control when it began
        self._was_ours = False
        self.acted_at: float | None = None
        self.words: str | None = None  # what was done, or why not
        self.last_gap: float | None = None  # seconds the last stretch without a controller lasted
        self.watch_until = 0.0

    def watching(self) -> bool:
        """Whether to ask at the HA poll rate (not the re-hash rate)."""
        return self.since is not None or time.monotonic() < self.watch_until

    def after_change(self) -> None:
        self.watch_until = time.monotonic() + WATCH_AFTER_CHANGE_SECONDS

    async def check(self, bound_seconds: float, put_back: Callable[[], str]) -> bool:
        """Each pass, once role and peers were asked. `bound_seconds`: SlurmctldTimeout and a margin
        (the held set's); `put_back` puts the last good set in this pod's directory, says what it did.
        True when it asked Slurm to take over."""
        ha, now = self.ha, time.monotonic()
        if ha.writes or any(p.error is None and p.role == HaRole.IN_CONTROL for p in ha.peers):
            if self.since is not None:
                self.last_gap = now - self.since
                log.info("ha_controller_in_control_again", seconds=round(self.last_gap, 3))
            self.since, self.ours_let_go, self._was_ours = None, False, ha.writes
            self.last_in_control = now
            return False
        if self.since is None:
            self.since, self.ours_let_go = now, self._was_ours
            log.warning("ha_no_controller_in_control", ours_let_go=self.ours_let_go, role=ha.role)
        self._was_ours = False
        if ha.role != HaRole.STANDBY:
            return False  # only a controller that is up can take control
        # the fast way only when no pod of a controller listed before this one is up: one that is (a
        # primary back, which had this one shut down to start without a handback) takes control
        # once its slurmctld starts, and a takeover now would take it from it again
        fast = self.ours_let_go and not self._earlier_pod_up()
        wait = ACT_AFTER_SECONDS if fast else bound_seconds
        started = self.since if fast else self.last_in_control
        if now - started < wait or (self.acted_at is not None and now - self.acted_at < bound_seconds):
            return False
        return await self._act(put_back)

    def _earlier_pod_up(self) -> bool:
        """Whether the config-sync of a controller listed before this one answers (its pod is up)."""
        try:
            order = host_names(conf_path(self.ha.env).read_text())
        except OSError:
            return False
        mine = order.index(self.ha.controller) if self.ha.controller in order else len(order)
        up = [p.controller for p in self.ha.peers if p.error is None and p.controller in order]
        return any(order.index(name) < mine for name in up if name is not None)

    async def _act(self, put_back: Callable[[], str]) -> bool:
        ha = self.ha
        try:
            order = host_names(conf_path(ha.env).read_text())
        except OSError as exc:
            self.words = f"cannot read slurm.conf to ask the other controllers: {exc}"
            return False
        if ha.controller not in order:
            return False
        index = order.index(ha.controller)
        said: list[str] = []
        for name in order:
            if name == ha.controller:
                continue
            answer = await ask_alone(name, ASK_SECONDS, ha.env)
            if answer.role == HaRole.IN_CONTROL:
                return False  # one serves: asked before this pass's answers caught up
            if answer.role == HaRole.STANDBY and order.index(name) < index:
                self.words = f"{name}, listed before {ha.controller}, is up: it is the one to take control"
                return False
            said.append(f"{name} {answer.role} ({answer.detail})")
        if index == 0:
            self.words = "this pod's controller is the primary: Slurm's own start takes control"
            return False
        put = put_back()
        argv, result = await ask_takeover(index, ASK_SECONDS, ha.env)
        self.acted_at = time.monotonic()
        gap = self.acted_at - (self.since or self.acted_at)
        self.words = (
            f"no controller in control for {gap:.1f}s ({ha.controller} standby; {'; '.join(said)}): "
            f"{put} on {ha.controller} and `{' '.join(argv)}` {result}"
        )
        log.warning("ha_takeover_asked", words=self.words)
        await self.events.emit(EVENT, self.words, "Warning")
        return True

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "since": None if self.since is None else _rfc3339(self.since),
            "seconds": None if self.since is None else round(now - self.since, 3),
            "acted": self.acted_at is not None,
            "acted_at": None if self.acted_at is None else _rfc3339(self.acted_at),
            "words": self.words,
            "last_gap_seconds": None if self.last_gap is None else round(self.last_gap, 3),
        }
