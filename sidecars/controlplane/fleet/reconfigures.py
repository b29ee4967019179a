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

A restart of slurmctld (config-sync applying a change that needs one, a crash, a pod restart) loses
what a reconfigure loses, and a backup taking control loses Weight and an admin's DOWN (measured,
docs/node-state.md). Each is a slurmctld of its own: a new BOOT_TIME, mostly. Two ways back that
BOOT_TIME can miss are watched as well, as it has 1-s resolution: a controller restarted, or a
standby that took control, that started in the same second as the one before (two controllers
started together do). So slurmctld answering again after reads it did not answer, or another
controller in control (`SlurmctldHost` more than once: each poll also asks who is, a `scontrol
ping` and the candidate asked alone when it is not the one known, slurm/primary.py), counts as its
coming back. Neither shows a restart that is over between two polls when the new slurmctld started
in the second the one before did (measured: a restart within 0.5 s of the start, 3 of 4 runs on a
quiet machine): a read answered within slurmctld's start second (`Configuration data as of`, stamped
when slurmctld answers, not past its BOOT_TIME) cannot rule out a new one in that second, so the
first read past it is taken as one (`start_second`): one more fleet read per slurmctld start at
most (not the fast reads that follow one seen: it may not have happened).
22.05 reconfigures in place and keeps its BOOT_TIME: there `sdiag`'s count of
REQUEST_RECONFIGURE RPCs is read too (measured on 22.05.8: it rises by one per `scontrol
reconfigure`, within a poll; `sdiag --reset` sets it back, taken as a new baseline). A reconfigure by
SIGHUP is no RPC and is not seen that way: the writers put back at the next fleet read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import structlog

from sidecars.slurm import SlurmClient, SlurmError

log = structlog.get_logger(__name__)


# 22.05 reconfigures in place (same BOOT_TIME); from 23.11 a reconfigure is a new slurmctld
IN_PLACE_BEFORE = (23, 11)
RECONFIGURE_RPC = "REQUEST_RECONFIGURE"


@dataclass(eq=False)
class ReconfigureWatch:
    client: SlurmClient
    _: KW_ONLY
    seconds: float
    on_seen: Callable[[], None]
    # slurmctld's BOOT_TIME as last read; None before a read
    booted: str | None = field(default=None, init=False)
    seen: int = field(default=0, init=False)  # how many new BOOT_TIMEs were seen (the first read is not one)
    seen_at: float | None = field(default=None, init=False)  # monotonic, the last one (any but start_second)
    # slurmctld back after unanswered reads, or another controller in control
    returns: int = field(default=0, init=False)
    start_second: int = field(
        default=0, init=False
    )  # reads past slurmctld's start second after one within it
    in_place: int = field(default=0, init=False)  # 22.05 reconfigures seen by sdiag's RPC count
    polls: int = field(default=0, init=False)  # reads slurmctld answered
    unanswered: int = field(default=0, init=False)  # reads it did not
    last_why: str | None = field(default=None, init=False)  # what the last one seen was
    _unanswered: bool = field(default=False, init=False)  # the last read went unanswered
    _early: bool = field(
        default=False, init=False
    )  # the last answered read was within slurmctld's start second
    # the controller the client follows, as last read
    _in_control: str | None = field(default=None, init=False)
    # sdiag's REQUEST_RECONFIGURE count as last read (22.05)
    _rpcs: int | None = field(default=None, init=False)
    # whether this release needs the count; None: not asked yet
    _counts: bool | None = field(default=None, init=False)

    async def _reconfigured_in_place(self) -> bool:
        """22.05: whether sdiag's REQUEST_RECONFIGURE count rose since the last read."""
        if self._counts is None:
            self._counts = not (await self.client.version()).at_least(*IN_PLACE_BEFORE)
        if not self._counts:
            return False
        count = (await self.client.sdiag_rpcs()).get(RECONFIGURE_RPC, 0)
        rose = self._rpcs is not None and count > self._rpcs
        self._rpcs = count  # a lower one is a reset (`sdiag --reset`): the new baseline
        return rose

    async def check(self) -> bool:
        """Read BOOT_TIME once (and, on 22.05, sdiag's count); True (and the callback called) when
        slurmctld is a new one, came back, or reconfigured in place since the last read."""
        try:
            read = await self.client.boot_time()  # the client's timeout: a loaded one is slow
        except SlurmError:
            self._unanswered = True  # the next read that answers compares with the last one
            self.unanswered += 1
            return False
        booted, asked = read.booted, read.asked  # both as Slurm prints them: comparable as text
        try:
            in_place = await self._reconfigured_in_place()
        except SlurmError as exc:  # BOOT_TIME answered: this one's answer is only missed this round
            log.debug("sdiag_unread", error=exc.message)
            in_place = False
        self.polls += 1
        ctl = self.client.controllers
        if ctl is not None:  # several controllers: who is in control now (a ping; slurm/primary.py)
            try:
                await self.client.follow()
            except SlurmError as exc:
                log.debug("slurmctld_follow_failed", error=exc.message)
        in_control = ctl.primary if ctl is not None else None
        moved = in_control is not None and self._in_control is not None and in_control != self._in_control
        why = None
        if booted is not None and self.booted is not None and booted != self.booted:
            why = "new_slurmctld"
            self.seen += 1
        elif self.booted is not None and (self._unanswered or moved):
            # the same BOOT_TIME second: control moved, or a read went unanswered meanwhile
            why = "control_moved" if moved else "came_back"
            self.returns += 1
        elif in_place:
            why = "reconfigured_in_place"
            self.in_place += 1
        elif booted is not None and booted == self.booted and self._early and asked and asked > booted:
            # the read before was within the second slurmctld started in: a restart since, in that
            # second and between two polls, shows the same BOOT_TIME and no unanswered read
            why = "start_second"
            self.start_second += 1
        if booted is not None:
            self.booted = booted
        self._unanswered = False
        self._early = booted is not None and (asked is None or asked <= booted)
        self._in_control = in_control or self._in_control
        if why is None:
            return False
        if why != "start_second":  # one that may not have happened: one read, not the fast ones after
            self.seen_at = time.monotonic()
        self.last_why = why
        log.info("slurmctld_reconfigure_seen", booted=booted, why=why, in_control=in_control)
        self.on_seen()
        return True

    def recent(self, seconds: float) -> bool:
        """Whether a reconfigure was seen within the last `seconds`."""
        return self.seen_at is not None and time.monotonic() - self.seen_at < seconds

    async def run(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self.seconds)

    def status(self) -> dict[str, Any]:
        return {
            "booted": self.booted,
            "seen": self.seen,
            "returns": self.returns,
            "start_second": self.start_second,
            "in_place": self.in_place,
            "polls": self.polls,
            "unanswered": self.unanswered,
            "last": self.last_why,
            "poll_seconds": self.seconds,
        }
