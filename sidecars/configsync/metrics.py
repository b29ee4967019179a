"""config-sync's metrics: every outcome of a change set (the Slurm commands it runs are counted by
the Slurm client)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sidecars.protocol.configsync import ConfigOutcome


class ConfigSyncMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.applies = Counter(
            "slurm_sidecars_config_applies", "Change sets by outcome", ["result"], registry=registry
        )
        for result in (
            ConfigOutcome.APPLIED,
            ConfigOutcome.REJECTED,
            ConfigOutcome.ROLLED_BACK,
            ConfigOutcome.RESTART_REQUIRED,
            ConfigOutcome.HELD,
        ):
            self.applies.labels(result=result)
        self.seconds = Histogram(
            "slurm_sidecars_config_apply_seconds",
            "From a change being seen to its outcome (verified, rejected)",
            ["result"],
            registry=registry,
            buckets=(0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 5, 10, 30, 60),
        )
        self.generation = Gauge(
            "slurm_sidecars_config_generation", "Generation of the applied set", registry=registry
        )
        self.pending = Gauge(
            "slurm_sidecars_config_pending", "1 while a change waits to be applied", registry=registry
        )
        self.restart_required = Gauge(
            "slurm_sidecars_config_restart_required",
            "1 while a held change needs slurmctld restarted",
            registry=registry,
        )
        self.held_jobs = Gauge(
            "slurm_sidecars_config_held_jobs",
            "Jobs a held change would end or requeue (0: nothing held for jobs)",
            registry=registry,
        )
        self.dry_run_seconds = Histogram(
            "slurm_sidecars_config_dry_run_seconds",
            "Time a dry run on a throwaway slurmctld took",
            registry=registry,
            buckets=(0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 15),
        )
        self.last_applied = Gauge(
            "slurm_sidecars_config_last_applied_timestamp_seconds",
            "When the applied set was last verified",
            registry=registry,
        )
