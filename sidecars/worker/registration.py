"""Is slurmd registered, and healing it in steps when not.

(1) restart slurmd, up to `heal_attempts` times with a doubling backoff; (2) declare the pod
unregistered: readiness fails with the reason, a metric, an Event, a report to the control plane.
A dead slurmd process is healed at once (with a restart command); a living but unregistered one
after `registration_timeout_seconds`. While the controller is unreachable nothing is remediated and the
clock restarts when it is back: a controller outage is not a worker fault.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

import structlog

from sidecars.protocol.events import EventReason
from sidecars.runtime.events import EventSink
from sidecars.worker.metrics import WorkerMetrics
from sidecars.worker.observation import Observation
from sidecars.worker.settings import WorkerSettings
from sidecars.worker.slurmd import RestartFailed, Slurmd

log = structlog.get_logger(__name__)

Confirm = Callable[[], Awaitable[Observation]]
Report = Callable[[bool, str], Awaitable[None]]


@dataclass
class RegistrationStatus:
    state: str = "unknown"  # unknown, pending, registered, healing, unregistered, controller_unreachable
    detail: str = "no observation yet"
    heal_attempts: int = 0
    declared_unregistered: bool = False  # the heal attempts ran out: the pod reports unready

    def as_json(self) -> dict[str, object]:
        return asdict(self)  # the field names are /status's


def problem(obs: Observation) -> str | None:
    """Why the node does not count as registered in this observation (None: it does)."""
    if obs.view is None:
        return "Slurm has no record of this node"
    st = obs.view.state
    if not st.registered:
        return f"node not registered (state {st})"
    return None


class Registration:
    def __init__(
        self,
        settings: WorkerSettings,
        slurmd: Slurmd,
        events: EventSink,
        metrics: WorkerMetrics,
        report: Report,
    ) -> None:
        self.settings = settings
        self.slurmd = slurmd
        self.events = events
        self.metrics = metrics
        self.report = report
        self.status = RegistrationStatus()
        self._since: float | None = None  # start of the current not-registered episode
        self._next_step_at = 0.0
        self._last_heal = ""

    def _slurmd_gone(self) -> str | None:
        if not self.settings.slurmd_restart_command:
            return None  # without a command the container runtime restarts slurmd; registration decides
        gone = self.slurmd.missing_for()  # also what makes a slurmd count as seen
        if self.slurmd.ever_seen and gone > self.settings.slurmd_missing_grace_seconds:
            return f"slurmd process gone for {gone:.1f}s"
        return None

    async def step(self, obs: Observation, confirm: Confirm) -> None:
        now = time.monotonic()
        gone = self._slurmd_gone()
        if obs.controller_down and not gone:
            if self.status.state != "controller_unreachable":
                log.warning("controller_unreachable_no_remediation", error=obs.error)
            self.status.state, self.status.detail = "controller_unreachable", obs.error or ""
            self._since = None
            return
        if not obs.ok and not gone:
            return  # a failed look tells nothing either way
        why = gone or problem(obs)
        if why is None:
            await self._registered()
            return
        self.metrics.registered.set(0)
        if self._since is None:
            self._since = now
            log.info("slurmd_not_registered", why=why)
        if self.status.declared_unregistered:
            return  # said once; a registration later takes it back
        if (
            not gone
            and self.status.heal_attempts == 0
            and now - self._since < self.settings.registration_timeout_seconds
        ):
            self.status.state = "pending"
            timeout = self.settings.registration_timeout_seconds
            self.status.detail = f"{why} for {now - self._since:.0f}s (timeout {timeout:g}s)"
            return
        if now < self._next_step_at:
            return
        # act only on a fresh, direct look with the controller answering
        fresh = await confirm()
        if gone and not self._slurmd_gone():
            # someone else started slurmd while we looked (the kubelet, an operator's roll): a
            # restart now would kill a slurmd that may be registering; its registration decides
            log.info("slurmd_back_before_restart", was=gone)
            return
        if fresh.controller_down and not gone:
            log.warning("controller_unreachable_no_remediation", error=fresh.error)
            self.status.state, self.status.detail = "controller_unreachable", fresh.error or ""
            self._since = None
            return
        why = gone or (problem(fresh) if fresh.ok else None)
        if why is None:
            if fresh.ok:
                await self._registered()
            return
        if self.status.heal_attempts < self.settings.heal_attempts and self.slurmd.can_restart:
            await self._restart(why, now)
        else:
            await self._declare(why)

    async def _restart(self, why: str, now: float) -> None:
        self.status.heal_attempts += 1
        n = self.status.heal_attempts
        backoff = self.settings.heal_backoff_seconds * 2 ** (n - 1)
        self._next_step_at = now + backoff
        self.status.state = "healing"
        log.warning(
            "slurmd_restarting", why=why, attempt=n, of=self.settings.heal_attempts, next_check_in=backoff
        )
        try:
            done = await self.slurmd.restart()
        except RestartFailed as exc:
            self.metrics.heal_attempts.labels(result="failed").inc()
            self._last_heal = f"restart failed: {exc}"
            self.status.detail = f"{why}; restart {n}/{self.settings.heal_attempts} failed: {exc}"
            log.warning("slurmd_restart_failed", attempt=n, error=str(exc))
        else:
            self.metrics.heal_attempts.labels(result="restarted").inc()
            self._last_heal = done
            self.status.detail = f"{why}; restart {n}/{self.settings.heal_attempts}: {done}"
            log.info("slurmd_restarted", attempt=n, how=done)
        await self.events.emit(EventReason.SLURMD_RESTARTED, self.status.detail, "Warning")

    async def _declare(self, why: str) -> None:
        self.status.state = "unregistered"
        self.status.declared_unregistered = True
        done = self.status.heal_attempts
        self.status.detail = (
            f"{why}; gave up after {done} slurmd restart(s) (last: {self._last_heal})"
            if done
            else f"{why}; slurmd cannot be restarted from here"
        )
        self.metrics.unregistered_declared.set(1)
        log.error("slurmd_declared_unregistered", why=self.status.detail)
        await self.events.emit(EventReason.SLURMD_UNREGISTERED, self.status.detail, "Warning")
        await self.report(False, self.status.detail)

    async def _registered(self) -> None:
        was = self.status
        self.metrics.registered.set(1)
        if was.state in {"healing", "unregistered"}:
            log.info("slurmd_registered_again", after_attempts=was.heal_attempts)
            await self.events.emit(
                EventReason.SLURMD_REGISTERED, f"registered again after {was.heal_attempts} restart(s)"
            )
            if was.declared_unregistered:
                self.metrics.unregistered_declared.set(0)
                await self.report(True, "registered")
        self.status = RegistrationStatus("registered", "registered")
        self._since = None
        self._next_step_at = 0.0
