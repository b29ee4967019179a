"""Planned maintenance windows: a Slurm MAINT reservation per window, drains as the jobs end.

A window lives in Slurm, not in memory: the reservation `slurm-sidecars-maint-<name>` holds its nodes,
start and end, its comment the reason. Slurm before 23.02 (22.05) has no reservation comment: there
the reason rides in the reservation's name, percent-encoded after a dot
(`slurm-sidecars-maint-<name>.<reason>`), the one free field such a release keeps.

Created ahead of time, a window keeps off its nodes any job that would still run at its start (Slurm's
own scheduling). From its start the nodes are drained with `slurm-sidecars: maintenance <name>`; a node
whose jobs still run is reported waiting for them, never killed. When the reservation is gone (Slurm
removes it at its end, or `delete`), every drain carrying that reason is undone, and only those: an
admin's drain or reservation is never touched. So a restarted control plane, or a new leader, carries
on from what Slurm says.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import structlog

from sidecars.controlplane.fleet.drains import DrainBatcher
from sidecars.controlplane.fleet.ranking import FAR_FUTURE
from sidecars.controlplane.fleet.snapshot import FleetNode
from sidecars.protocol import drains
from sidecars.protocol.events import EventReason
from sidecars.slurm import Reservation, SlurmClient, SlurmCommandError
from sidecars.slurm.hostlist import HostlistError, count, expand

log = structlog.get_logger(__name__)

RESERVATION_PREFIX = "slurm-sidecars-maint-"
REASON_IN_NAME = "."  # before 23.02: `<prefix><window>.<percent-encoded reason>` (no `.` in a window name)
DRAIN_PREFIX = drains.MAINTENANCE
KUBE_PREFIX = "k8s-"  # windows named after a Kubernetes Node's annotation
WINDOW_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
MAX_REASON = 200
MAX_DURATION = 366 * 86400
PAST_SLACK = 60  # a start this far behind the clock is still "now" (clocks and typing differ)
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?$")

Emit = Callable[[str, EventReason, str], Awaitable[None]]  # (slurm node, reason, message)


class WindowError(Exception):
    """A refused window: `status` is the HTTP answer (404 unknown nodes, 409 anything else a
    well-formed request can still be refused for), the message says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def parse_duration(text: str) -> int:
    """`90m`, `2h`, `1h30m`, `1d` -> seconds (whole minutes: what a reservation holds)."""
    m = _DURATION.match(text.strip()) if isinstance(text, str) else None
    if not m or not any(m.groups()):
        raise WindowError(409, f"bad duration {text!r}: use e.g. 90m, 2h, 1h30m or 1d")
    d, h, mins = (int(g or 0) for g in m.groups())
    seconds = ((d * 24 + h) * 60 + mins) * 60
    if seconds <= 0:
        raise WindowError(409, f"bad duration {text!r}: must be at least 1m")
    if seconds > MAX_DURATION:
        raise WindowError(409, f"bad duration {text!r}: at most 366d")
    return seconds


def parse_start(text: str, now: float) -> int:
    """`now` or an RFC 3339 time with its offset -> epoch seconds; a start in the past is refused."""
    if not isinstance(text, str):
        raise WindowError(409, "start must be 'now' or an RFC 3339 time")
    if text.strip().lower() == "now":
        return int(now)
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise WindowError(
            409, f"bad start {text!r}: use 'now' or RFC 3339, e.g. 2026-12-01T14:00:00Z"
        ) from None
    if when.tzinfo is None:
        raise WindowError(409, f"bad start {text!r}: RFC 3339 needs an offset (Z or +01:00)")
    start = int(when.timestamp())
    if start < now - PAST_SLACK:
        raise WindowError(409, f"start {text} is in the past")
    return start


def _clock(epoch: int) -> str:
    return time.strftime("%H:%M", time.localtime(epoch))


def _first(names: list[str], shown: int = 20) -> str:
    """Names for an error message, at most `shown` of them (a refusal stays one short line)."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _iso(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Window:
    name: str
    nodes: tuple[str, ...]
    start: int  # epoch seconds
    end: int
    reason: str
    reservation: str  # the Slurm reservation's name (what `delete` removes)

    @property
    def drain_reason(self) -> str:
        return DRAIN_PREFIX + self.name

    @property
    def source(self) -> str:
        return "kubernetes" if self.name.startswith(KUBE_PREFIX) else "api"

    def active(self, now: float) -> bool:
        return self.start <= now < self.end

    def overlaps(self, other: Window) -> bool:
        return bool(set(self.nodes) & set(other.nodes)) and self.start < other.end and other.start < self.end

    @classmethod
    def from_reservation(cls, r: Reservation) -> Window | None:
        """Ours when the name carries our prefix; every other reservation is someone else's."""
        if not r.name.startswith(RESERVATION_PREFIX) or r.start is None or r.end is None:
            return None
        name, _, encoded = r.name[len(RESERVATION_PREFIX) :].partition(REASON_IN_NAME)
        reason = r.comment or urllib.parse.unquote(encoded, errors="replace")
        return cls(name, r.nodes, r.start, r.end, reason, r.name)


def reservation_name(window: str, reason: str, *, comments: bool) -> str:
    """The reservation of a window: the reason goes in its comment where Slurm keeps one, else here."""
    if comments:
        return RESERVATION_PREFIX + window
    return RESERVATION_PREFIX + window + REASON_IN_NAME + urllib.parse.quote(reason, safe="")


def node_report(window: Window, node: FleetNode | None, now: float) -> tuple[str, str]:
    """(state, words) for one node of a window: scheduled, waiting, draining or ready."""
    if not window.active(now):
        return "scheduled", f"scheduled (starts {_clock(window.start)})"
    if node is None:
        return "unknown", "not in Slurm"
    if node.busy:
        jobs = ", ".join(str(j) for j in node.jobs) or "?"
        word = "jobs" if len(node.jobs) > 1 else "job"
        ends = (
            "no end time"
            if node.busy_until is None or node.busy_until >= FAR_FUTURE
            else f"ends {_clock(node.busy_until)}"
        )
        return "waiting", f"waiting for {word} {jobs} ({ends})"
    if node.drain or node.state == "DOWN":
        return "ready", "ready"
    return "draining", "drain requested"


STATES = ("scheduled", "waiting", "draining", "ready", "unknown")


@dataclass(eq=False)
class Maintenance:
    """Reads the windows from Slurm every cycle; the leader drains and undrains to match them."""

    slurm: SlurmClient
    drains: DrainBatcher
    nodes: Callable[[], Mapping[str, FleetNode]]
    _: KW_ONLY
    emit: Emit | None = None
    clock: Callable[[], float] = time.time
    # as last read from Slurm (for reports; Slurm is the truth)
    windows: list[Window] = field(default_factory=list, init=False)
    read_error: str | None = field(default=None, init=False)
    # (window, node, state) already sent as an Event
    _told: set[tuple[str, str, str]] = field(default_factory=set, init=False)

    # ------------------------------------------------------------------ reads
    async def read(self) -> list[Window]:
        now = self.clock()
        # a reservation past its end waits a moment for Slurm's purge: it is over already
        found = [
            w for r in await self.slurm.reservations() if (w := Window.from_reservation(r)) and w.end > now
        ]
        self.windows = sorted(found, key=lambda w: (w.start, w.name))
        self.read_error = None
        return self.windows

    def describe(self, window: Window) -> dict[str, Any]:
        now, nodes = self.clock(), self.nodes()
        per_node = {}
        for name in window.nodes:
            state, words = node_report(window, nodes.get(name), now)
            per_node[name] = {"state": state, "detail": words}
        return {
            "name": window.name,
            "nodes": list(window.nodes),
            "start": _iso(window.start),
            "end": _iso(window.end),
            "reason": window.reason,
            "source": window.source,
            "active": window.active(now),
            "reservation": window.reservation,
            "node_states": per_node,
        }

    def counts(self) -> dict[str, int]:
        """Nodes per report state over every window (the metric and `status`)."""
        now, nodes = self.clock(), self.nodes()
        tally = dict.fromkeys(STATES, 0)
        for w in self.windows:
            for name in w.nodes:
                tally[node_report(w, nodes.get(name), now)[0]] += 1
        return tally

    # ------------------------------------------------------------------ writes (leader only)
    async def create(
        self, *, name: str | None, nodes: str, start: str, duration: str, reason: str, kube: bool = False
    ) -> Window:
        """Validate everything, then write one reservation; a refusal changes nothing."""
        now = self.clock()
        if name is None:
            name = time.strftime("m%Y%m%d-%H%M", time.gmtime(now)) + "-" + secrets.token_hex(2)
        if not isinstance(name, str) or not WINDOW_NAME.match(name):
            raise WindowError(409, "name must be lower-case letters, digits and '-', at most 63")
        if name.startswith(KUBE_PREFIX) and not kube:
            raise WindowError(
                409, f"names starting with {KUBE_PREFIX!r} are kept for Kubernetes Node windows"
            )
        if not isinstance(reason, str) or not reason.strip():
            raise WindowError(409, "reason is required")
        if len(reason) > MAX_REASON or any(ord(c) < 32 for c in reason) or "=" in reason:
            raise WindowError(409, f"reason must be at most {MAX_REASON} printable characters without '='")
        seconds = parse_duration(duration)
        begin = parse_start(start, now)
        if not isinstance(nodes, str):
            raise WindowError(409, "nodes must be a Slurm hostlist, e.g. gpu[01-04]")
        try:
            count(nodes)  # refused here, cheaply, before anything is expanded
            # bounded by now, but up to MAX_NAMES names is still work the event loop must not do
            names = await asyncio.to_thread(lambda: sorted(set(expand(nodes))))
        except HostlistError as exc:
            raise WindowError(409, f"bad hostlist: {exc}") from None
        if not names:
            raise WindowError(409, "nodes must name at least one node")
        known = await self.slurm.nodes_named(names)
        unknown = [n for n in names if n not in known]
        if unknown:
            raise WindowError(404, f"unknown nodes: {_first(unknown)}")
        comments = await self.slurm.reservation_comments()
        reservation = reservation_name(name, reason.strip(), comments=comments)
        window = Window(name, tuple(names), begin, begin + seconds, reason.strip(), reservation)
        for other in await self.read():
            if other.name == name:
                raise WindowError(409, f"a window named {name} exists already")
            if other.overlaps(window):
                shared = sorted(set(other.nodes) & set(window.nodes))
                raise WindowError(
                    409,
                    f"overlaps window {other.name} on {', '.join(shared)}"
                    f" ({_iso(other.start)} to {_iso(other.end)})",
                )
        # scontrol reads a start in its own local time, i.e. this process's (so does our parsing of it)
        at = "now" if begin <= now else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(begin))
        try:
            await self.slurm.create_reservation(
                window.reservation,
                window.nodes,
                start=at,
                duration=str(seconds // 60),
                flags="MAINT,IGNORE_JOBS",  # running jobs go on; they are waited for, not killed
                comment=window.reason if comments else None,
            )
        except SlurmCommandError as exc:  # e.g. an admin's reservation holds the nodes then
            raise WindowError(409, f"Slurm refused the reservation: {exc.message}") from None
        log.info(
            "maintenance_created", window=name, nodes=len(names), start=_iso(begin), minutes=seconds // 60
        )
        await self.read()
        return next((w for w in self.windows if w.name == name), window)

    async def delete(self, name: str) -> Window:
        """Remove the reservation; the next cycle undoes the window's drains (ours only)."""
        window = next((w for w in await self.read() if w.name == name), None)
        if window is None:
            raise WindowError(404, f"no maintenance window {name}")
        try:
            await self.slurm.delete_reservation(window.reservation)
        except SlurmCommandError as exc:
            raise WindowError(409, f"Slurm refused to delete the reservation: {exc.message}") from None
        log.info("maintenance_deleted", window=name)
        await self.read()
        return window

    async def reconcile(self) -> None:
        """Drain the nodes of active windows; undrain our maintenance drains whose window is over."""
        windows = await self.read()
        now, nodes = self.clock(), self.nodes()
        active: dict[str, Window] = {}
        for w in windows:
            if w.active(now):
                active.update(dict.fromkeys(w.nodes, w))
        for name, node in nodes.items():
            window = active.get(name)
            if window is not None:
                if not node.drain:
                    self.drains.submit(name, "drain", window.drain_reason)
                state, words = node_report(window, node, now)
                await self._tell(window.name, name, state, words)
            elif (
                node.reason is not None
                and node.reason.startswith(DRAIN_PREFIX)
                and (node.drain or node.state == "DOWN")  # Slurm may keep the text after an undrain
            ):
                # the batcher undrains only while the reason is exactly this one, read from Slurm then
                self.drains.submit(name, "undrain", node.reason)
                await self._tell(
                    node.reason[len(DRAIN_PREFIX) :], name, "ended", "maintenance over: undrained"
                )
        live = {w.name for w in windows}
        self._told = {
            t
            for t in self._told
            if (t[0] in live and t[2] != "ended")
            or (t[1] in nodes and nodes[t[1]].drain and nodes[t[1]].reason == DRAIN_PREFIX + t[0])
        }

    async def _tell(self, window: str, node: str, state: str, words: str) -> None:
        key = (window, node, state)
        if self.emit is None or key in self._told or state in {"draining", "unknown"}:
            return
        self._told.add(key)
        reason = {
            "waiting": EventReason.MAINTENANCE_WAITING,
            "ready": EventReason.MAINTENANCE_READY,
            "ended": EventReason.MAINTENANCE_ENDED,
        }
        await self.emit(node, reason.get(state, EventReason.MAINTENANCE), f"window {window}: {words}")
