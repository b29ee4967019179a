"""The control plane's one whole-cluster upgrade at a time: started from the API, run as a named
task, paused and resumed between stages, reported per stage; each stage's start and end is a log
line, metrics, a wake-up of the page, and is handed to `emit` when one is given (Kubernetes Events
come with the Kubernetes seam: none is wired yet).

The roles (where the daemons run) are handed in: the dev cluster's release swap in the demo and the
tests. Without them the start is refused with `why_unavailable`, one line that names what is missing
(in Kubernetes: the settings that name slurmdbd's and slurmctld's workloads, cluster_roles_kube.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Gauge

from sidecars.controlplane.changes.budget import UpgradeError
from sidecars.controlplane.changes.cluster_upgrade import (
    STAGES,
    STATES,
    ClusterRoles,
    ClusterUpgrade,
    Emit,
)
from sidecars.slurm import Version, daemons

log = structlog.get_logger(__name__)

ROLES = daemons.UPGRADE_ORDER


class ClusterUpgradeMetrics:
    """Each stage's state (its index in STATES) and its duration in seconds, by stage."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.stage_state = Gauge(
            "slurm_sidecars_cluster_upgrade_stage_state",
            "each stage's state of the last whole-cluster upgrade: "
            + ", ".join(f"{i} {s}" for i, s in enumerate(STATES)),
            ["stage"],
            registry=registry,
        )
        self.stage_seconds = Gauge(
            "slurm_sidecars_cluster_upgrade_stage_seconds",
            "how long each stage of the last whole-cluster upgrade ran, in seconds",
            ["stage"],
            registry=registry,
        )
        self.unanswered_seconds = Gauge(
            "slurm_sidecars_cluster_upgrade_slurmctld_unanswered_seconds",
            "how long slurmctld did not answer during the last upgrade's slurmctld stage, in seconds",
            registry=registry,
        )


class ClusterUpgrades:
    """At most one upgrade runs; the last one is kept for `report()` until the next starts."""

    def __init__(
        self,
        roles: ClusterRoles | None,
        why_unavailable: str,
        metrics: ClusterUpgradeMetrics,
        *,
        emit: Emit | None = None,
        verify_timeout_seconds: float = 60.0,
    ) -> None:
        self.roles = roles
        self.why_unavailable = why_unavailable
        self._metrics = metrics
        self._emit = emit
        self._verify_timeout_seconds = verify_timeout_seconds
        self.current: ClusterUpgrade | None = None
        self.on_change: Callable[[], None] | None = None  # after each stage's start and end (the page)
        self._task: asyncio.Task[str] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, target: Version, images: Mapping[str, str]) -> ClusterUpgrade:
        """Start the upgrade in its own task; 409 while one runs or where there are no roles."""
        if self.roles is None:
            raise UpgradeError(409, self.why_unavailable)
        if self.running:
            assert self.current is not None
            raise UpgradeError(
                409,
                f"an upgrade to {self.current.target} runs ({self.current.status.state}): wait for its end",
            )
        missing = [r for r in ROLES if not images.get(r)]
        if missing:
            raise UpgradeError(400, f"no image (or release) given for {', '.join(missing)}")
        up = ClusterUpgrade(
            self.roles,
            target,
            images,
            emit=self._said,
            verify_timeout_seconds=self._verify_timeout_seconds,
        )
        for stage in STAGES:
            self._metrics.stage_state.labels(stage).set(0)
            self._metrics.stage_seconds.labels(stage).set(0)
        self.current = up
        self._task = asyncio.create_task(up.run(), name=f"cluster-upgrade-{target}")
        self._task.add_done_callback(self._ended)
        return up

    def _ended(self, task: asyncio.Task[str]) -> None:
        # the stages catch their own failures: an exception here is a defect, said loudly
        if not task.cancelled() and task.exception() is not None:
            log.error("cluster_upgrade_task_failed", error=repr(task.exception()))

    async def _said(self, stage: str, state: str, message: str) -> None:
        self._metrics.stage_state.labels(stage).set(STATES.index(state))
        if self.current is not None:
            done = self.current.status.stage(stage)
            if done.seconds is not None and state != "running":
                self._metrics.stage_seconds.labels(stage).set(done.seconds)
            unanswered = self.current.status.slurmctld_unanswered_seconds
            if unanswered is not None:
                self._metrics.unanswered_seconds.set(unanswered)
        if self.on_change is not None:
            self.on_change()
        if self._emit is not None:
            await self._emit(stage, state, message)

    def set_paused(self, paused: bool) -> ClusterUpgrade:
        """Pause (before the next stage) or resume the upgrade under way; 404 when none runs."""
        if self.current is None or not self.running:
            raise UpgradeError(404, "no whole-cluster upgrade runs")
        if paused:
            self.current.pause()
        else:
            self.current.resume()
        return self.current

    def report(self) -> dict[str, Any] | None:
        if self.current is None:
            return None
        return self.current.status.report()

    async def close(self) -> None:
        """Stop the task at shutdown (a stage under way is cut: the status says where it was)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
