"""Drain and undrain requests, batched: everything that arrives within a short window becomes one
`scontrol update nodename=<hostlist>` call per reason (agents use one reason, so one call).

Only reasons that start with `slurm-sidecars:` are ever written, and an undrain only clears a drain
whose current reason is exactly the one asked for: someone else's drain is never touched. Both are
decided on the named nodes read from Slurm just before the write, not on the fleet snapshot.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Literal

import structlog

from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.slurm import SlurmClient, SlurmCommandError, SlurmError

log = structlog.get_logger(__name__)

READ_RETRY_SECONDS = 1.0  # after the read a batch rests on failed (the client has retried already)
Action = Literal["drain", "undrain"]


@dataclass(frozen=True, slots=True)
class DrainRequest:
    action: Action
    reason: str


@dataclass(frozen=True, slots=True)
class Written:
    """What one batch wrote (each node's request), and when the read it rested on began (monotonic):
    a node seen drained before then and found undrained by that read had its drain removed since."""

    requests: Mapping[str, DrainRequest]
    read_at: float

    @property
    def names(self) -> set[str]:
        return set(self.requests)


@dataclass(eq=False)
class DrainBatcher:
    client: SlurmClient
    metrics: ControlPlaneMetrics
    _: KW_ONLY
    window: float = 0.1
    on_written: Callable[[Written], None] = lambda _: None
    may_write: Callable[[], bool] = lambda: True
    clock: Callable[[], float] = time.monotonic
    # the latest request per node wins
    pending: dict[str, DrainRequest] = field(default_factory=dict, init=False)
    # drains whose write failed without an answer (it may have landed): requeued, and if the
    # next read finds exactly that drain in place, it was ours, reported written (with the
    # first read's time), so an Event owed on it is not lost
    _uncertain: dict[str, float] = field(default_factory=dict, init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def submit(self, node: str, action: Action, reason: str) -> None:
        self.pending[node] = DrainRequest(action, reason)
        self.metrics.drain_requests.labels(action, "queued").inc()
        self._wake.set()

    async def run(self) -> None:
        """Flush batches forever (run only while leader; pending requests survive a pause)."""
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.window)  # let the rest of the burst arrive
            self._wake.clear()
            batch, self.pending = self.pending, {}
            if batch and not self._fenced("drain", list(batch)):
                await self.flush(batch)

    def _fenced(self, action: Action, names: list[str]) -> bool:
        """Asked right before each write (the read before it can take seconds, and the Lease be
        lost meanwhile): the agents retry against the new leader."""
        if self.may_write():
            return False
        log.warning("drain_batch_dropped", action=action, nodes=len(names), reason="not the leader")
        self.metrics.drain_requests.labels(action, "dropped_not_leader").inc(len(names))
        return True

    async def flush(self, batch: dict[str, DrainRequest]) -> None:
        read_at = self.clock()
        try:
            # decide on Slurm's state now, not on a snapshot up to an interval old: a drain written
            # with our reason would replace a reason set since, an undrain would clear someone's drain
            nodes = await self.client.nodes_named(batch.keys())
        except SlurmError as exc:
            log.warning("drain_batch_deferred", nodes=len(batch), error=exc.message)
            for req in batch.values():
                self.metrics.drain_requests.labels(req.action, "deferred").inc()
            await asyncio.sleep(READ_RETRY_SECONDS)  # newer requests meanwhile win over these
            self._requeue(batch, batch)
            return
        drains: dict[str, list[str]] = defaultdict(list)
        undrains: list[str] = []
        resumes: list[str] = []  # ours and DOWN (a drain that timed out): UNDRAIN would keep it down
        landed: dict[str, float] = {}  # uncertain writes of ours found in place: written then
        for name, req in sorted(batch.items()):
            node = nodes.get(name)
            uncertain = self._uncertain.pop(name, None)
            if node is None:
                self.metrics.drain_requests.labels(req.action, "unknown_node").inc()
                continue
            st, reason = node.state, node.reason.text if node.reason else None
            if req.action == "drain":
                if st.drain:  # drained already, by us or by someone whose reason we keep
                    self.metrics.drain_requests.labels("drain", "already").inc()
                    if uncertain is not None and reason == req.reason:
                        landed[name] = uncertain
                    continue
                drains[req.reason].append(name)
            elif reason == req.reason and st.base == "DOWN":
                resumes.append(name)
            elif reason == req.reason and st.drain:
                undrains.append(name)
            else:
                taken = st.drain or st.base == "DOWN"
                self.metrics.drain_requests.labels("undrain", "not_ours" if taken else "already").inc()
        if landed:  # each with its own first read's time
            for name, at in landed.items():
                self.on_written(Written({name: batch[name]}, at))
        for reason, names in drains.items():
            self._report(await self._write("drain", names, reason, batch, read_at=read_at), batch, read_at)
        if undrains:
            self._report(await self._write("undrain", undrains, None, batch), batch, read_at)
        if resumes:
            self._report(await self._write("undrain", resumes, None, batch, resume=True), batch, read_at)

    def _report(self, names: set[str], batch: dict[str, DrainRequest], read_at: float) -> None:
        """Told right after each write (not after the whole batch): a refresh that sees it sooner
        is the exception, not the rule."""
        if names:
            self.on_written(Written({n: batch[n] for n in names}, read_at))

    def _requeue(self, names: Iterable[str], batch: dict[str, DrainRequest]) -> None:
        """Keep requests for the next batch (a newer request for a node wins)."""
        for name in names:
            self.pending.setdefault(name, batch[name])
        self._wake.set()

    async def _write(
        self,
        action: Action,
        names: list[str],
        reason: str | None,
        batch: dict[str, DrainRequest],
        *,
        resume: bool = False,
        read_at: float | None = None,
    ) -> set[str]:
        if self._fenced(action, names):
            return set()
        try:
            await self._call(action, names, reason, resume)
        except SlurmCommandError as exc:
            if len(names) == 1:
                return self._failed(action, names, exc)
            # one bad node must not sink the others: isolate it
            log.warning("drain_batch_refused", action=action, nodes=len(names), error=exc.message)
            done: set[str] = set()
            for name in names:
                if self._fenced(action, [name]):
                    continue
                try:
                    await self._call(action, [name], reason, resume)
                    done.add(name)
                except SlurmError as one:
                    self._failed(action, [name], one)
            return done
        except SlurmError as exc:
            # unreachable after the client's retries: keep the requests for the next batch (a
            # drain may have landed all the same: the next read tells)
            if read_at is not None:
                for name in names:
                    self._uncertain.setdefault(name, read_at)
            self._requeue(names, batch)
            return self._failed(action, names, exc)
        log.info("drain_batch", action="resume" if resume else action, nodes=len(names), reason=reason)
        return set(names)

    async def _call(self, action: Action, names: list[str], reason: str | None, resume: bool) -> None:
        try:
            if action == "drain":
                assert reason is not None
                await self.client.drain(names, reason)
            elif resume:
                await self.client.resume(names)
            else:
                await self.client.undrain(names)
        except SlurmError:
            self.metrics.drain_batches.labels(action, "error").inc()
            raise
        self.metrics.drain_batches.labels(action, "ok").inc()
        self.metrics.drain_batch_size.observe(len(names))
        self.metrics.drain_requests.labels(action, "written").inc(len(names))

    def _failed(self, action: Action, names: list[str], exc: SlurmError) -> set[str]:
        log.warning("drain_failed", action=action, nodes=",".join(names), error=exc.message)
        self.metrics.drain_requests.labels(action, "failed").inc(len(names))
        return set()
