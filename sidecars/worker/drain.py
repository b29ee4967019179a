"""The drain the preStop hook asks for, as a state machine driven by observations of the node.

Drained means DRAIN set and nothing ALLOCATED, MIXED or COMPLETING; a failed look never counts
(fail closed). A node someone else drained keeps their reason. On time-out the policy decides:
`requeue` sets the node DOWN so Slurm requeues its batch jobs (only when Slurm, asked at the
deadline, shows our drain), `leave` leaves it. The drain is recorded in the pod-lifetime state
directory, so an agent restarted during a drain keeps it instead of undraining its own node.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog

from sidecars.protocol.drains import DRAINED, NO_RECORD, TIMED_OUT
from sidecars.protocol.events import EventReason
from sidecars.runtime.events import EventSink
from sidecars.runtime.files import replace_atomically
from sidecars.slurm import Job, NodeState, SlurmError
from sidecars.worker.metrics import WorkerMetrics
from sidecars.worker.observation import Observation
from sidecars.worker.settings import WorkerSettings, is_our_reason
from sidecars.worker.source import NodeSource

log = structlog.get_logger(__name__)

PROGRESS_EVERY = 5.0  # seconds between progress lines while jobs run
JOBS_REFRESH = 30.0  # alone, the job list for progress lines is re-read this often


@dataclass
class DrainRecord:
    pod: str
    reason: str
    deadline: float  # epoch seconds
    started: float  # epoch seconds
    result: str | None = None
    detail: str = ""

    @classmethod
    def load(cls, path: Path) -> DrainRecord | None:
        try:
            data = json.loads(path.read_text())
            return cls(
                **{k: data[k] for k in ("pod", "reason", "deadline", "started")},
                result=data.get("result"),
                detail=data.get("detail", ""),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("drain_record_unreadable", path=str(path), error=str(exc))
            return None

    def save(self, path: Path) -> None:
        replace_atomically(path, json.dumps(asdict(self)), mode=0o600)


class Drainer:
    def __init__(
        self,
        settings: WorkerSettings,
        source: NodeSource,
        metrics: WorkerMetrics,
        events: EventSink,
        dynamic: Any = None,
    ) -> None:
        self.settings = settings
        self.source = source
        self.metrics = metrics
        self.events = events
        self._dynamic = dynamic  # () -> bool: delete the record after the drain
        self.path = settings.state_dir / f"drain-{settings.node_name}.json"
        self.record: DrainRecord | None = None
        self.active = False
        self._waiters: list[asyncio.Future[dict[str, Any]]] = []
        self._sent_at = 0.0
        self._last_progress = 0.0
        self._jobs: list[Job] | None = None
        self._jobs_at = 0.0
        self.unsaved: str | None = None  # why the last request's record could not be written

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        """At start: a drain recorded by this pod is kept (resumed when it had not finished)."""
        rec = DrainRecord.load(self.path)
        if rec is None:
            return
        if rec.pod != self.settings.pod:
            log.info("drain_record_of_other_pod_ignored", record_pod=rec.pod)
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            return
        self.record = rec
        self.active = rec.result is None
        log.info("drain_record_found", reason=rec.reason, result=rec.result, resumed=self.active)

    @property
    def pod_terminating(self) -> bool:
        """A drain was asked for in this pod: the node must stay drained."""
        return self.record is not None

    def request(self, reason: str | None, timeout: float | None) -> asyncio.Future[dict[str, Any]]:
        """Start the drain, or join the one running; the future resolves with its result."""
        now = time.time()
        deadline = now + (timeout if timeout is not None else self.settings.drain_timeout_seconds)
        full_reason = self.settings.drain_reason(reason)
        if self.record is None or not self.active:
            self.record = DrainRecord(self.settings.pod, full_reason, deadline, now)
            log.info("drain_requested", reason=full_reason, timeout=round(deadline - now, 1))
        else:
            self.record.deadline = deadline  # the hook's own deadline is the one that counts
        try:
            self.record.save(self.path)
            self.unsaved = None
        except OSError as exc:
            # a full or read-only volume must not stop the drain: draining is the safe side; only
            # an agent restarted mid-drain loses it (and the hook, asking again, starts it anew)
            self.unsaved = f"drain record not written ({self.path}): {exc}"
            log.error("drain_record_not_written", path=str(self.path), error=str(exc))
        self.active = True
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut

    def forget(self, fut: asyncio.Future[dict[str, Any]]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(fut)

    def as_json(self) -> dict[str, Any] | None:
        if self.record is None:
            return None
        return {**asdict(self.record), "active": self.active, "waiters": len(self._waiters)}

    # ------------------------------------------------------------------ the machine
    async def step(self, obs: Observation) -> None:
        if not self.active or self.record is None:
            return
        rec = self.record
        now = time.time()
        if not obs.ok:
            if now >= rec.deadline:
                await self._time_out(obs)
            else:
                self._progress(now, f"lookup failed, waiting: {obs.error}")
            return
        if obs.view is None and obs.origin != "slurm":
            # the hook's exit 0 lets the pod die: "no record" rests on Slurm's own word, never on
            # a relayed one (a control plane from before the node existed, a misrouted request)
            obs = await self.source.observe_slurm()
            if not obs.ok:
                self._progress(now, f"no record per the control plane; Slurm unreadable: {obs.error}")
                return
        view = obs.view
        if view is None:
            await self._finish(NO_RECORD, "Slurm has no record of this node")
            return
        st = view.state
        if not st.drain:
            if time.monotonic() - self._sent_at < 2.0:
                return  # just asked; a batching control plane may take a moment
            try:
                written = await self.source.drain(rec.reason)
                self._sent_at = time.monotonic()
                if written:
                    log.info("drain_set", reason=rec.reason, state=str(st))
                else:  # drained since that look (someone's reason, kept); the next look goes on
                    log.info("drain_found_set", state=str(st))
            except SlurmError as exc:
                log.warning("drain_set_failed_retrying", error=str(exc))
            return
        if st.drained:
            if obs.origin != "slurm":
                # trust only Slurm's own word for the last step (fail closed on a stale snapshot)
                direct = await self.source.observe_slurm()
                if not direct.ok or direct.view is None or not direct.view.state.drained:
                    return
            await self._delete_if_dynamic(st)
            await self._finish(DRAINED, f"drained ({st}); reason {view.reason!r}")
            return
        if now >= rec.deadline:
            await self._time_out(obs)
            return
        await self._report_progress(obs, now)

    async def _report_progress(self, obs: Observation, now: float) -> None:
        if now - self._last_progress < PROGRESS_EVERY:
            return
        view = obs.view
        assert view is not None
        if view.jobs is not None:
            jobs, until = list(view.jobs), view.busy_until
        else:
            if self._jobs is None or time.monotonic() - self._jobs_at > JOBS_REFRESH:
                try:
                    self._jobs = await self.source.jobs_here()
                    self._jobs_at = time.monotonic()
                except SlurmError as exc:
                    log.debug("drain_jobs_unreadable", error=str(exc))
            running = [j for j in self._jobs or [] if j.running]
            jobs = [j.job_id for j in running]
            ends = [j.end_time for j in running if j.end_time]
            until = max(ends) if ends else None
        self._last_progress = now
        log.info(
            "drain_waiting",
            state=str(view.state),
            jobs_left=jobs,
            expected_end=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(until)) if until else None,
            deadline_in=round(self.record.deadline - now, 1) if self.record else None,
        )

    def _progress(self, now: float, what: str) -> None:
        if now - self._last_progress >= PROGRESS_EVERY:
            self._last_progress = now
            log.info("drain_waiting", detail=what)

    async def _time_out(self, obs: Observation) -> None:
        assert self.record is not None
        policy = self.settings.drain_timeout_policy
        if policy == "requeue":
            # DOWN ends jobs: it rests on Slurm's word now, not on a look (or a control-plane
            # snapshot) that predates a drain someone else set since
            obs = await self.source.observe_slurm()
        view = obs.view
        if not obs.ok:
            detail = f"drain timed out; node state unknown: {obs.error}"
        elif policy == "leave":
            detail = "drain timed out; jobs left running (policy leave)"
        elif view is None or not view.state.busy:
            if view is not None and view.state.drained:
                await self._delete_if_dynamic(view.state)
                await self._finish(DRAINED, f"drained ({view.state}); reason {view.reason!r}")
            return  # the jobs ended meanwhile: the machine goes on with this look's successor
        elif is_our_reason(view.reason):
            reason = f"{self.record.reason}: drain timed out, jobs requeued"
            try:
                # straight to Slurm: the deadline is now, no batching
                await self.source.set_down(reason)
                detail = "drain timed out; node set DOWN so Slurm requeues its batch jobs"
            except SlurmError as exc:
                detail = f"drain timed out; setting the node DOWN failed: {exc}"
        elif view.state.drain:
            detail = f"drain timed out; node drained by someone else ({view.reason!r}): left as it is"
        else:
            detail = f"drain timed out; node undrained by someone else ({view.reason!r}): left as it is"
        await self._finish(TIMED_OUT, detail)

    async def _delete_if_dynamic(self, state: NodeState) -> None:
        # Slurm flags a node that registered itself (`slurmd -Z`) DYNAMIC_NORM (23.02+): its word
        # holds even when slurmd's command line cannot be seen from here
        dynamic = "DYNAMIC_NORM" in state.flags
        if not (self.settings.dynamic or dynamic or (self._dynamic is not None and self._dynamic())):
            return
        try:
            await self.source.delete_record()
            log.info("dynamic_node_deleted")
        except SlurmError as exc:
            log.warning("dynamic_node_delete_failed", error=str(exc))

    async def _finish(self, result: str, detail: str) -> None:
        assert self.record is not None
        rec = self.record
        seconds = max(0.0, time.time() - rec.started)
        rec.result, rec.detail = result, detail
        with contextlib.suppress(OSError):
            rec.save(self.path)
        self.active = False
        self.metrics.drains.labels(result=result).inc()
        self.metrics.drain_seconds.observe(seconds)
        level = log.warning if result == TIMED_OUT else log.info
        level("drain_finished", result=result, detail=detail, seconds=round(seconds, 2))
        await self.events.emit(
            EventReason.DRAIN_TIMED_OUT if result == TIMED_OUT else EventReason.DRAINED,
            detail,
            "Warning" if result == TIMED_OUT else "Normal",
        )
        answer = {"result": result, "detail": detail, "seconds": round(seconds, 3)}
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(answer)
        self._waiters.clear()
        self._jobs = None
