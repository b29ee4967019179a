"""config-sync's metrics: every outcome of a change set (the Slurm commands it runs are counted by
the Slurm client)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sidecars.protocol.configsync import ConfigOutcome


class ConfigSyncMetrics:
    def __init__(
        self,
        registry: CollectorRegistry,
        hold_rules: Iterable[str] = (),
        held_outcomes: Iterable[ConfigOutcome] = (),
    ) -> None:
        """`hold_rules` the names of the daemon's hold rules, `held_outcomes` their outcomes."""
        self.applies = Counter(
            "slurm_sidecars_config_applies", "Change sets by outcome", ["result"], registry=registry
        )
        # every outcome a set can have here: refused before or after the swap, applied, or each
        # hold rule's (configsync/holds); with HA peers, ha_rollout's come as they happen
        outcomes = (ConfigOutcome.APPLIED, ConfigOutcome.REJECTED, ConfigOutcome.ROLLED_BACK)
        for result in dict.fromkeys((*outcomes, *held_outcomes)):
            self.applies.labels(result=result)
        self.hold_rules = tuple(hold_rules)
        self.held = Gauge(
            "slurm_sidecars_config_held",
            "1 while the change seen is held by this hold rule",
            ["rule"],
            registry=registry,
        )
        for name in self.hold_rules:
            self.held.labels(rule=name).set(0)
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
