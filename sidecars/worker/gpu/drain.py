"""What the agent does with its GPU check's verdict: drain this node on a fault, and give it back
once the check passes, only when the drain is the check's own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from sidecars.protocol.events import EventReason
from sidecars.runtime.events import EventSink
from sidecars.worker.drain import Drainer
from sidecars.worker.gpu.check import GpuCheck, gpu_reason, is_gpu_reason
from sidecars.worker.metrics import WorkerMetrics
from sidecars.worker.observation import Observation
from sidecars.worker.settings import WorkerSettings
from sidecars.worker.source import NodeSource

log = structlog.get_logger(__name__)

__all__ = ["GpuDrain"]


@dataclass(eq=False)
class GpuDrain:
    settings: WorkerSettings
    check: GpuCheck
    source: NodeSource
    drainer: Drainer
    metrics: WorkerMetrics
    events: EventSink
    known: Callable[[], Observation | None]

    async def run(self) -> None:
        """Every interval: check the GPUs, then drain or give back this node by what was found."""
        while True:
            await self.check.once()
            for state in ("healthy", "faulty", "unknown", "absent"):
                self.metrics.gpu_health.labels(state).set(1 if self.check.verdict.state == state else 0)
            try:
                await self.act()
            except Exception as exc:  # Slurm or the control plane: asked again after the next check
                log.warning("gpu_drain_failed", error=str(exc))
            await asyncio.sleep(self.settings.gpu_check_interval_seconds)

    async def act(self) -> None:
        known = self.known()
        view = known.view if known is not None else None
        if view is None or self.drainer.pod_terminating or self.drainer.active:
            return  # no record to act on, or the pod's own drain owns the node now
        verdict, drained = self.check.verdict, "DRAIN" in view.state.flags
        if verdict.state == "faulty" and self.settings.gpu_check_drain and not drained:
            reason = gpu_reason(verdict.faults[0])
            if await self.source.drain(reason):
                self.metrics.gpu_drains.labels("drain").inc()
                await self.events.emit(
                    EventReason.SLURM_GPU_CHECK_FAILED,
                    f"drained {view.name}: {'; '.join(verdict.faults)}",
                    "Warning",
                )
        elif verdict.state in {"healthy", "absent"} and drained and is_gpu_reason(view.reason):
            assert view.reason is not None
            if await self.source.undrain(view.reason):  # the exact reason: only ours is lifted
                self.metrics.gpu_drains.labels("undrain").inc()
                await self.events.emit(
                    EventReason.SLURM_GPU_CHECK_PASSED, f"undrained {view.name}: {verdict.detail}", "Normal"
                )
