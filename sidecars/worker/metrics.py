"""The worker agent's metrics (the Slurm commands it runs are counted by the Slurm client)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registered = Gauge(
            "slurm_sidecars_worker_registered",
            "1 when this pod's slurmd is registered with slurmctld, 0 when not",
            registry=registry,
        )
        self.unregistered_declared = Gauge(
            "slurm_sidecars_worker_unregistered_declared",
            "1 after the healing steps failed and the pod was declared unregistered",
            registry=registry,
        )
        self.heal_attempts = Counter(
            "slurm_sidecars_worker_heal_attempts",
            "slurmd restarts by the agent, by result",
            ["result"],
            registry=registry,
        )
        self.drains = Counter(
            "slurm_sidecars_drains",
            "drains served to the preStop hook, by result",
            ["result"],
            registry=registry,
        )
        self.drain_seconds = Histogram(
            "slurm_sidecars_drain_seconds",
            "time from the drain request to its result",
            registry=registry,
            buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400),
        )
        self.fallbacks = Counter(
            "slurm_sidecars_worker_control_plane_fallbacks",
            "times the agent fell back to Slurm because the control plane did not answer",
            registry=registry,
        )
        self.slurmd_readiness = Gauge(
            "slurm_sidecars_worker_slurmd_readiness_source",
            "1 for where slurmd's readiness comes from now: verbose (slurmd's own words), plain (no words:"
            " why in /status), registration (no HTTP on this release), unknown; 0 for the others",
            ["source"],
            registry=registry,
        )
        self.gpu_files = Gauge(
            "slurm_sidecars_worker_gpu_job_files",
            "GPU -> job mapping files currently written",
            registry=registry,
        )
        self.gpu_health = Gauge(
            "slurm_sidecars_worker_gpu_check",
            "1 for the GPU check's last verdict (healthy, faulty, unknown, absent), 0 for the others",
            ["state"],
            registry=registry,
        )
        self.gpu_drains = Counter(
            "slurm_sidecars_worker_gpu_drains",
            "drains asked for a GPU fault, and given back once the check passed (drain, undrain)",
            ["action"],
            registry=registry,
        )
