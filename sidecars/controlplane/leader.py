"""Leader election through a coordination.k8s.io/v1 Lease, as client-go does it.

A Lease is expired when its holder has not renewed it within `leaseDurationSeconds`, measured on
this replica's clock from when it last saw the Lease change (so clock skew between replicas does
not matter). The leader steps down if it cannot renew for 2/3 of the duration, before anyone else
may take over. Without Kubernetes there is one replica, and it leads.

Fencing: `is_leader` is read at each write (the Kubernetes client's fence, the drain batch, the
loops), and it holds only until the step-down deadline, measured from when the last successful
renewal request was SENT (another replica's clock starts no earlier than that). A leader frozen
(SIGSTOP, a long GC pause, a stalled VM) wakes past it and writes nothing, whatever its loops were
in the middle of; the third of the Lease left is the margin for the clocks' rates and the
last request in flight. `fence()` closes it at once (shutdown: writers stop before the release).

The leader renews every `renew_seconds` (7 s by default: about 9 calls a minute, whatever the fleet)
and, after a failed renewal, every `retry_seconds` until the deadline: a 15 s Lease then gets four
tries before its leader steps down. It renews with one call, not two: it replaces the record it
wrote last, guarded by that record's resourceVersion (client-go's fast path); a 409 means someone
wrote since, and a read decides.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field, replace

import structlog

from sidecars.kube import KubeClient, LeaseConflict, LeaseRecord
from sidecars.runtime.waits import until_set, within

log = structlog.get_logger(__name__)


@dataclass(eq=False)
class LeaderElector:
    kube: KubeClient | None  # None: no Kubernetes, this replica leads alone
    namespace: str
    name: str
    identity: str
    _: KW_ONLY
    lease_seconds: float = 15.0
    renew_seconds: float = 7.0
    retry_seconds: float = 1.0
    on_change: Callable[[bool], None] = lambda _: None
    _leading: bool = field(init=False)
    _fenced: bool = field(default=False, init=False)
    holder: str | None = field(init=False)
    # (resourceVersion, monotonic when first seen)
    _observed: tuple[str, float] = field(default=("", 0.0), init=False)
    _renewed_at: float = field(default=0.0, init=False)
    _held: LeaseRecord | None = field(default=None, init=False)  # the record we wrote last, while we lead
    changed: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def __post_init__(self) -> None:
        self._leading = self.kube is None
        self.holder = self.identity if self.kube is None else None
        self.changed = asyncio.Event()

    @property
    def write_deadline(self) -> float:
        """Monotonic time until which this replica may write: 2/3 of the Lease after the start of
        the last renewal that succeeded."""
        return self._renewed_at + self.lease_seconds * 2 / 3

    @property
    def is_leader(self) -> bool:
        """Leading now, with margin: read at the moment of each write, never cached."""
        if self._fenced or not self._leading:
            return False
        return self.kube is None or time.monotonic() < self.write_deadline

    def fence(self) -> None:
        """No write from now on (before stopping the writers and releasing the Lease)."""
        self._fenced = True

    def _set(self, leader: bool) -> None:
        if not leader:
            self._held = None
        if leader != self._leading:
            self._leading = leader
            log.info("leadership", leader=leader, identity=self.identity, lease=self.name)
            self.on_change(leader)
            self.changed.set()

    async def run(self, stop: asyncio.Event) -> None:
        if self.kube is None:
            self.on_change(True)
            await stop.wait()
            return
        try:
            while not stop.is_set():
                failed = True
                began = time.monotonic()
                # a leader's look may not outlast its step-down deadline (a stalled API server
                # must not keep it leading past the point where another replica may take over)
                left = self.write_deadline - time.monotonic()
                try:
                    await within(self.step(), max(left, 0.1) if self._leading else None)
                    failed = False
                except LeaseConflict:
                    log.info("lease_conflict", lease=self.name)  # another replica wrote first; re-read
                except Exception as exc:
                    log.warning("lease_failed", error=str(exc))
                if self._leading and time.monotonic() >= self.write_deadline:
                    log.warning("lease_renew_deadline_passed", lease=self.name)
                    self._set(False)
                # a leader whose renewal failed tries again soon: a blip of the API server must not
                # cost the lease, and the renewals that succeed can then be few (client-go's retry)
                wait = self.renew_seconds
                if failed and self._leading:
                    wait = min(self.retry_seconds, self.renew_seconds)
                elif self._leading:
                    # a renewal that succeeded: the next is due `renew_seconds` after this one was
                    # SENT, as the write deadline runs from there. Counted from the answer, a slow
                    # API server's latency came twice out of the margin, and the leader lost its
                    # writes between two renewals that both succeeded (#34, a fenced upgrade start)
                    wait = max(0.0, self.renew_seconds - (time.monotonic() - began))
                await until_set(stop, wait)
        finally:
            if self._leading:
                await self._release()

    async def step(self) -> None:
        """Read the Lease once and acquire, renew or follow."""
        assert self.kube is not None
        # the deadline runs from the request's start: the API server may have written it (and
        # other replicas started their clocks) at any moment after that
        sent = time.monotonic()
        now = dt.datetime.now(dt.UTC)
        held = self._held
        # the one-call renewal only within the deadline: a leader that wakes past it (frozen,
        # paused) reads first, and writes nothing when another replica holds the Lease by now
        if self.is_leader and held is not None:
            try:
                self._took(await self.kube.update_lease(replace(held, renew_time=now)), sent)
                return
            except LeaseConflict:  # written by someone since: read it and decide below
                log.info("lease_changed_since_renewed", lease=self.name)
                self._held = None
        record = await self.kube.get_lease(self.namespace, self.name)
        if record is None:
            created = await self.kube.create_lease(
                LeaseRecord(
                    namespace=self.namespace,
                    name=self.name,
                    holder=self.identity,
                    duration_seconds=int(self.lease_seconds),
                    acquire_time=now,
                    renew_time=now,
                    transitions=0,
                    resource_version="",
                )
            )
            self._took(created, sent)
            return
        if record.resource_version != self._observed[0]:
            self._observed = (record.resource_version, time.monotonic())
        self.holder = record.holder
        if record.holder == self.identity:
            renewed = await self.kube.update_lease(
                replace(
                    record,
                    holder=self.identity,
                    duration_seconds=int(self.lease_seconds),
                    acquire_time=record.acquire_time or now,
                    renew_time=now,
                )
            )
            self._took(renewed, sent)
            return
        expired = not record.holder or time.monotonic() - self._observed[1] >= record.duration_seconds
        if not expired:
            self._set(False)
            return
        taken = await self.kube.update_lease(
            replace(
                record,
                holder=self.identity,
                duration_seconds=int(self.lease_seconds),
                acquire_time=now,
                renew_time=now,
                transitions=record.transitions + 1,
            )
        )
        log.info("lease_taken_over", lease=self.name, previous=record.holder)
        self._took(taken, sent)

    def _took(self, record: LeaseRecord, sent: float) -> None:
        self._held = record
        self._observed = (record.resource_version, time.monotonic())
        self._renewed_at = sent
        self.holder = record.holder
        self._set(True)

    async def _release(self) -> None:
        """Hand the Lease back on a graceful stop so another replica takes over at once."""
        assert self.kube is not None
        self._set(False)
        try:
            record = await self.kube.get_lease(self.namespace, self.name)
            if record is not None and record.holder == self.identity:
                await self.kube.update_lease(replace(record, holder=None))
        except Exception as exc:
            log.warning("lease_release_failed", error=str(exc))
