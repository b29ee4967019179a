"""slurmrestd's replicas take turns at a drained restart, so that the Service keeps a ready endpoint
while a change rolls through: a coordination.k8s.io/v1 Lease (`--restd-turn-lease`) is the turn.

A change reaches every replica at once (they mount the same ConfigMap and Secret). Each takes the
turn before its drain and hands it back once its new slurmrestd listens and the pod has been ready
again for `settle_seconds` (the Service taking it back); the others wait, "pending" in /status with
the holder named, and apply the change they hold when the turn comes. The turn is renewed every
third of its duration while held, so a long drain keeps it; a replica that dies holding it stops
renewing, and the others take it once it has not changed for its duration, measured on their own
clock from when they first saw it so (as the control plane's leader election does, controlplane/
leader.py: clock skew between pods does not matter).

The Lease is expected to exist (the overlay ships it, so that no `create` right is needed); where it
does not, it is created once (an account without that right gets a 403, shown in /status and retried).
Any failure to reach the API leaves the change pending and is retried: it never drains without the
turn, and it is never an error of the change.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from sidecars.kube import LeaseConflict, LeaseRecord
from sidecars.protocol.configsync import RestdTurnState
from sidecars.runtime.waits import within

if TYPE_CHECKING:
    from sidecars.kube import KubeClient

log = structlog.get_logger(__name__)

Notify = Callable[[], Awaitable[None]]


class Turns:
    """The turn at a drained restart among slurmrestd's replicas: `async with turns.turn(notify):`."""

    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_seconds: float,
        poll_seconds: float = 1.0,
    ) -> None:
        self._kube = kube
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.state = RestdTurnState.FREE
        self.holder: str | None = None  # who holds the turn, as last read
        self.error: str | None = None  # why the Lease could not be read or written, as last tried
        self._observed: tuple[str, float] = ("", 0.0)  # (resourceVersion, monotonic when first seen)
        self._held: LeaseRecord | None = None

    def view(self) -> dict[str, Any]:
        return {"lease": self.name, "state": self.state, "holder": self.holder, "error": self.error}

    @contextlib.asynccontextmanager
    async def turn(self, notify: Notify) -> AsyncIterator[None]:
        """Wait for the turn (`notify` each time what /status shows changes), hold it for the block."""
        renewing: asyncio.Task[None] | None = None
        try:
            await self._take(notify)
            renewing = asyncio.create_task(self._renew(), name="restd-turn-renew")
            yield
        finally:
            # also when stopped while taking it (cancelled right after the Lease was written)
            if renewing is not None:
                renewing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewing
            # bounded: a stalled API server must not hold the sync loop; the turn expires anyway
            with contextlib.suppress(TimeoutError):
                await within(self._release(), self.lease_seconds)
            self.state, self.holder = RestdTurnState.FREE, None
            await notify()

    def _expired(self, record: LeaseRecord) -> bool:
        if record.resource_version != self._observed[0]:
            self._observed = (record.resource_version, time.monotonic())
        return time.monotonic() - self._observed[1] >= record.duration_seconds

    async def _take(self, notify: Notify) -> None:
        while True:
            try:
                if await self._try_take():
                    self.state, self.holder, self.error = RestdTurnState.HOLDING, self.identity, None
                    log.info("restd_turn_taken", lease=self.name)
                    await notify()
                    return
                self.error = None
            except LeaseConflict:
                continue  # another replica wrote first: read again at once
            except Exception as exc:  # the API unreachable or refusing: pending, said, tried again
                self.error = f"the turn's Lease {self.name} could not be read or written: {exc}"[:300]
                log.warning("restd_turn_lease_failed", lease=self.name, error=str(exc))
            if self.state != RestdTurnState.WAITING:
                log.info("restd_turn_waiting", lease=self.name, holder=self.holder)
            self.state = RestdTurnState.WAITING
            await notify()
            await asyncio.sleep(self.poll_seconds)

    async def _try_take(self) -> bool:
        now = dt.datetime.now(dt.UTC)
        record = await self._kube.get_lease(self.namespace, self.name)
        if record is None:
            log.info("restd_turn_lease_created", lease=self.name)
            record = await self._kube.create_lease(
                LeaseRecord(
                    namespace=self.namespace,
                    name=self.name,
                    holder=None,
                    duration_seconds=max(1, int(self.lease_seconds)),
                    acquire_time=None,
                    renew_time=None,
                    transitions=0,
                    resource_version="",
                )
            )
        self.holder = record.holder
        if record.holder and record.holder != self.identity and not self._expired(record):
            return False
        if record.holder and record.holder != self.identity:
            log.warning("restd_turn_passed_by", lease=self.name, holder=record.holder)
        self._held = await self._kube.update_lease(
            replace(
                record,
                holder=self.identity,
                duration_seconds=max(1, int(self.lease_seconds)),
                acquire_time=now,
                renew_time=now,
                transitions=record.transitions + 1,
            )
        )
        return True

    async def _renew(self) -> None:
        """Every third of the turn's duration while it is held: a long drain keeps it."""
        while self._held is not None:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await self._renew_once()
            except Exception as exc:  # tried again at the next third; the turn lasts its duration
                log.warning("restd_turn_renew_failed", lease=self.name, error=str(exc))

    async def _renew_once(self) -> None:
        held = self._held
        if held is None:
            return
        try:
            self._held = await self._kube.update_lease(replace(held, renew_time=dt.datetime.now(dt.UTC)))
        except LeaseConflict:
            record = await self._kube.get_lease(self.namespace, self.name)
            if record is None or record.holder != self.identity:
                # taken by another replica: this one was frozen past the duration. Its drain goes
                # on (stopping halfway would drop more); said loudly
                self._held = None
                log.warning("restd_turn_lost", lease=self.name, holder=record and record.holder)
                return
            self._held = record

    async def _release(self) -> None:
        """Hand the turn back (guarded: only the record this replica wrote), so the next takes it now."""
        held, self._held = self._held, None
        while held is not None:
            try:
                await self._kube.update_lease(replace(held, holder=None))
                log.info("restd_turn_released", lease=self.name)
                return
            except LeaseConflict:
                record = await self._kube.get_lease(self.namespace, self.name)
                held = record if record is not None and record.holder == self.identity else None
            except Exception as exc:  # the turn expires on its own: the others wait that long
                log.warning("restd_turn_release_failed", lease=self.name, error=str(exc))
                return
