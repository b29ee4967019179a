"""The agent's turn at the GPU -> job map: Slurm's jobs here read only when what the agent saw says
they may have changed, then dcgm-exporter's files and the bounded attribution metric rebuilt."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import structlog

from sidecars.slurm import SlurmError
from sidecars.worker.gpu.attribution import GpuAttribution
from sidecars.worker.jobmap import JobMapping, gpu_jobs
from sidecars.worker.metrics import WorkerMetrics
from sidecars.worker.observation import Observation
from sidecars.worker.settings import WorkerSettings
from sidecars.worker.slurm_source import SlurmSource

log = structlog.get_logger(__name__)

__all__ = ["GpuMapStep"]


@dataclass(eq=False)
class GpuMapStep:
    settings: WorkerSettings
    mapping: JobMapping
    attribution: GpuAttribution | None
    slurm: SlurmSource
    metrics: WorkerMetrics
    _mapped_for: frozenset[int] | None = field(default=None, init=False)
    _wanted: dict[int, list[int]] = field(default_factory=dict, init=False)
    _mapped_state: str = field(default="", init=False)
    _mapped_at: float = field(default=0.0, init=False)

    async def step(self, obs: Observation) -> None:
        if not obs.ok:
            return
        view = obs.view
        try:
            if view is None or (view.jobs is None and not view.state.busy) or view.jobs == ():
                wanted: dict[int, list[int]] = {}
                self._mapped_for = frozenset()
            elif view.jobs is not None and frozenset(view.jobs) == self._mapped_for:
                wanted = self._wanted  # coordinated and unchanged: no Slurm query of our own
            elif (
                view.jobs is None
                and str(view.state) == self._mapped_state
                and time.monotonic() - self._mapped_at < self.settings.poll_seconds
            ):
                wanted = self._wanted  # alone: re-read jobs on a state change or once per poll
            else:
                jobs = await self.slurm.jobs_here()
                wanted = gpu_jobs(jobs, self.settings.node_name)
                self._mapped_for = frozenset(view.jobs) if view.jobs is not None else None
                self._mapped_state, self._mapped_at = str(view.state), time.monotonic()
        except SlurmError as exc:
            log.warning("gpu_mapping_not_refreshed", error=str(exc))
            return
        self._wanted = wanted
        if self.attribution is not None:
            self.attribution.update(wanted)
        try:
            self.mapping.reconcile(wanted)
        except OSError as exc:  # a full or read-only volume must not stop drains and healing
            log.error("gpu_mapping_not_written", error=str(exc), dir=str(self.mapping.dir))
            return
        self.metrics.gpu_files.set(len(wanted))
