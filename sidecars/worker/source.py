"""Where the agent learns its node's state, and how it changes it.

Alone, it asks Slurm itself, at a low rate (fast only while a drain waits). Coordinated, it long-polls
the control plane, which reads the whole cluster once per interval, and sends its drains there; when
the control plane cannot be reached it falls back to Slurm, so an outage never blocks a drain. While
it is away, each turn asks the control plane again and then Slurm once, with a backoff and jitter
between turns (worker.backoff): the whole fleet falls back at once, and slurmctld must not pay for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import structlog

from sidecars.runtime.waits import until_set
from sidecars.slurm import Job
from sidecars.worker.backoff import Backoff
from sidecars.worker.cp_client import AgentClient, ControlPlaneUnavailable
from sidecars.worker.observation import Observation
from sidecars.worker.slurm_source import SlurmSource

log = structlog.get_logger(__name__)


class NodeSource:
    """Either source, with the fallback: the control plane when configured and answering, else Slurm."""

    def __init__(self, slurm: SlurmSource) -> None:
        self.slurm = slurm
        self.cp: AgentClient | None = None
        self.backoff = Backoff(first_seconds=0.25, max_seconds=15.0)
        self._cp_retry_at = 0.0
        self._version: int | None = None
        self.mode: str = "alone"
        self._on_fallback: Callable[[], None] | None = None

    def attach(
        self,
        cp: AgentClient,
        *,
        backoff: Backoff | None = None,
        on_fallback: Callable[[], None] | None = None,
    ) -> None:
        """Coordinated mode: ask the control plane first, Slurm when it does not answer
        (and the control plane again after the backoff's next wait)."""
        self.cp = cp
        if backoff is not None:
            self.backoff = backoff
        self.mode = "control-plane"
        self._on_fallback = on_fallback

    def _fell_back(self, what: str, exc: Exception) -> None:
        if self.mode != "fallback":
            log.warning("control_plane_unreachable_falling_back", during=what, error=str(exc))
        self.mode = "fallback"
        self._cp_retry_at = time.monotonic() + self.backoff.failed()
        self._version = None
        if self._on_fallback is not None:
            self._on_fallback()

    @property
    def using_cp(self) -> bool:
        return self.cp is not None and time.monotonic() >= self._cp_retry_at

    def interval(self, draining: bool, poll_seconds: float, drain_poll_seconds: float) -> float:
        """The wait before the agent's next look: the backoff's while the control plane is away,
        else fast only while a drain waits (1 s at most against the control plane's long poll)."""
        away = self.fallback_wait()
        if away is not None:
            return away if draining else max(away, poll_seconds)
        if not draining:
            return poll_seconds
        return drain_poll_seconds if self.cp is None else min(poll_seconds, 1.0)

    def fallback_wait(self) -> float | None:
        """While the control plane is away: the seconds until the next turn is due (None otherwise)."""
        if self.cp is None or self.mode != "fallback":
            return None
        return max(0.0, self._cp_retry_at - time.monotonic())

    async def observe(self, wait: float, wake: asyncio.Event) -> Observation | None:
        """The node's state after at most `wait` seconds; None when `wake` interrupted the wait."""
        if self.cp is not None and not self.using_cp:
            # the control plane away: this turn's wait, then the control plane first again, and
            # Slurm once only when it still does not answer
            await until_set(wake, wait)
            if wake.is_set():
                return None
            if not self.using_cp:
                return await self.slurm.observe()
            wait = 0.0
        if self.cp is not None:
            poll = asyncio.ensure_future(self.cp.node(self._version, wait))
            woke = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait({poll, woke}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                woke.cancel()
                if not poll.done():
                    poll.cancel()
                    with contextlib.suppress(asyncio.CancelledError, ControlPlaneUnavailable):
                        await poll
            if poll.cancelled():
                return None
            try:
                obs = poll.result()
            except ControlPlaneUnavailable as exc:
                self._fell_back("observe", exc)
                return await self.slurm.observe()
            if self.mode != "control-plane":
                log.info("control_plane_back")
            self.mode = "control-plane"
            self.backoff.reset()
            self._version = obs.view.version if obs.view else None
            return obs
        await until_set(wake, wait)
        if wake.is_set():
            return None
        return await self.slurm.observe()

    async def observe_slurm(self) -> Observation:
        """Slurm's own word, never the control plane's view: what a drain's end rests on."""
        return await self.slurm.observe()

    async def jobs_here(self) -> list[Job]:
        return await self.slurm.jobs_here()

    async def set_down(self, reason: str) -> None:
        """A drain's deadline: DOWN now, straight to Slurm, no batching."""
        await self.slurm.set_down(reason)

    async def delete_record(self) -> None:
        await self.slurm.delete_record()

    async def drain(self, reason: str) -> bool:
        """Ask for our drain; False when Slurm, looked at just now, shows the node drained already.
        The control plane makes the same check itself before its batched write."""
        if await self._control_plane_took("drain", lambda cp: cp.drain(reason)):
            return True
        return await self.slurm.drain(reason)

    async def undrain(self, reason: str) -> bool:
        if await self._control_plane_took("undrain", lambda cp: cp.undrain(reason)):
            return True
        return await self.slurm.undrain(reason)

    async def _control_plane_took(self, what: str, ask: Callable[[AgentClient], Awaitable[None]]) -> bool:
        """Whether the control plane took a request (it writes to Slurm in its batch); False when it
        is not used now or did not answer (then we fall back, and the caller asks Slurm itself)."""
        if self.cp is None or not self.using_cp:
            return False
        try:
            await ask(self.cp)
        except ControlPlaneUnavailable as exc:
            self._fell_back(what, exc)
            return False
        return True

    async def report(self, pod_namespace: str, pod_name: str, registered: bool, detail: str) -> None:
        """Best effort: the readiness probe, metric and Event say the same."""
        if self.cp is None:
            return
        try:
            await self.cp.report(pod_namespace, pod_name, registered, detail)
        except ControlPlaneUnavailable as exc:
            log.warning("report_not_delivered", error=str(exc))

    async def report_version(self, pod_namespace: str, pod_name: str, version: str) -> bool:
        """Best effort, True when delivered: the next turn tries again."""
        if self.cp is None or not self.using_cp:
            return False
        try:
            await self.cp.report_version(pod_namespace, pod_name, version)
        except ControlPlaneUnavailable as exc:
            log.warning("version_report_not_delivered", error=str(exc))
            return False
        return True
