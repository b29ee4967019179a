"""The worker agent's metrics (the Slurm commands it runs are counted by the Slurm client)."""

from __future__ import annotations

from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        gauge, counter = partial(Gauge, registry=registry), partial(Counter, registry=registry)
        self.registered = gauge(
            "slurm_sidecars_worker_registered",
            "1 when this pod's slurmd is registered with slurmctld, 0 when not",
        )
        self.unregistered_declared = gauge(
            "slurm_sidecars_worker_unregistered_declared",
            "1 after the healing steps failed and the pod was declared unregistered",
        )
        self.heal_attempts = counter(
            "slurm_sidecars_worker_heal_attempts", "slurmd restarts by the agent, by result", ["result"]
        )
        self.drains = counter(
            "slurm_sidecars_drains", "drains served to the preStop hook, by result", ["result"]
        )
        self.drain_seconds = Histogram(
            "slurm_sidecars_drain_seconds",
            "time from the drain request to its result",
            registry=registry,
            buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400),
        )
        self.fallbacks = counter(
            "slurm_sidecars_worker_control_plane_fallbacks",
            "times the agent fell back to Slurm because the control plane did not answer",
        )
        self.slurmd_readiness = gauge(
            "slurm_sidecars_worker_slurmd_readiness_source",
            "1 for where slurmd's readiness comes from now: verbose (slurmd's own words), plain (no words:"
            " why in /status), registration (no HTTP on this release), unknown; 0 for the others",
            ["source"],
        )
        self.gpu_files = gauge(
            "slurm_sidecars_worker_gpu_job_files", "GPU -> job mapping files currently written"
        )
        self.gpu_health = gauge(
            "slurm_sidecars_worker_gpu_check",
            "1 for the GPU check's last verdict (healthy, faulty, unknown, absent), 0 for the others",
            ["state"],
        )
        self.gpu_drains = counter(
            "slurm_sidecars_worker_gpu_drains",
            "drains asked for a GPU fault, and given back once the check passed (drain, undrain)",
            ["action"],
        )
