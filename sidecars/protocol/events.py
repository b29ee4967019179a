"""Every reason of a Kubernetes Event the sidecars write. An `EventSink` takes only these, so a
reason cannot be misspelt or invented at a call site (mypy refuses a bare string)."""

from __future__ import annotations

from enum import StrEnum
from typing import NewType


class EventReason(StrEnum):
    # config-sync
    CONFIG_APPLIED = "ConfigApplied"
    CONFIG_STAGING = "ConfigStaging"
    CONFIG_NOT_EVERYWHERE = "ConfigNotEverywhere"
    CONFIG_REJECTED = "ConfigRejected"
    CONFIG_ROLLED_BACK = "ConfigRolledBack"
    CONFIG_RESTART_REQUIRED = "ConfigRestartRequired"
    CONFIG_HELD_FOR_JOBS = "ConfigHeldForJobs"
    CONFIG_HELD = "ConfigHeld"  # held by a Slurm state (a hold rule with no Event of its own)
    CONFIG_RESTORED = "ConfigRestored"
    CONFIG_HANDOVER = "ConfigHandover"
    CONFIG_WAITS_FOR_DATABASE = "ConfigWaitsForDatabase"
    SLURMCTLD_NO_CONTROLLER = "SlurmctldNoController"
    SLURM_TOKEN_EXPIRING = "SlurmTokenExpiring"  # less than the warning time left (or gone)
    SLURM_TOKEN_UNREADABLE = "SlurmTokenUnreadable"  # missing, empty or no JWT
    # the worker agent and the drain hook
    SLURMD_RESTARTED = "SlurmdRestarted"
    SLURMD_UNREGISTERED = "SlurmdUnregistered"
    SLURMD_REGISTERED = "SlurmdRegistered"
    SLURM_NODE_CLAIM_REFUSED = "SlurmNodeClaimRefused"
    SLURM_GPU_CHECK_FAILED = "SlurmGpuCheckFailed"
    SLURM_GPU_CHECK_PASSED = "SlurmGpuCheckPassed"
    DRAIN_NOT_RECORDED = "DrainNotRecorded"
    DRAINED = "Drained"
    DRAIN_TIMED_OUT = "DrainTimedOut"
    UNDRAINED = "Undrained"  # a new agent took back a drain of ours
    DRAIN_HOOK_RETRYING = "DrainHookRetrying"
    DRAIN_HOOK_GAVE_UP = "DrainHookGaveUp"
    # the control plane
    SLURMCTLD_TAKEOVER = "SlurmctldTakeover"
    SLURM_DRAIN_REAPPLIED = "SlurmDrainReapplied"
    SLURM_DRAIN_UNOWNED = "SlurmDrainUnowned"
    SLURM_DRAIN_UNOWNED_RESUMED = "SlurmDrainUnownedResumed"
    SLURM_GRES_SHORT = "SlurmGresShort"
    SLURM_GRES_HEALED = "SlurmGresHealed"
    SLURM_HEALTH_DRAIN = "SlurmHealthDrain"
    SLURM_HEALTH_DRAIN_CAPPED = "SlurmHealthDrainCapped"
    SLURM_HEALTH_UNDRAIN = "SlurmHealthUndrain"
    SLURM_RECORD_DELETED = "SlurmRecordDeleted"
    SLURM_RECORD_KEPT = "SlurmRecordKept"
    SLURM_TOPOLOGY_REFUSED = "SlurmTopologyRefused"
    WORKERS_UNREGISTERED = "WorkersUnregistered"
    WORKER_RECYCLED = "WorkerRecycled"
    MAINTENANCE = "Maintenance"  # a window's other news (scheduled)
    MAINTENANCE_WAITING = "MaintenanceWaiting"
    MAINTENANCE_READY = "MaintenanceReady"
    MAINTENANCE_ENDED = "MaintenanceEnded"
    UPGRADE_DRAINING = "UpgradeDraining"
    UPGRADE_REPLACING = "UpgradeReplacing"


# a whole-cluster upgrade's stage Events: ClusterUpgrade<Stage><What>, e.g. ClusterUpgradeSlurmctldRolledBack
UpgradeStageReason = NewType("UpgradeStageReason", str)
Reason = EventReason | UpgradeStageReason


def upgrade_stage_reason(stage: str, what: str) -> UpgradeStageReason:
    """`stage` as the upgrade names it (`slurmctld`), `what` CamelCase (`RolledBack`)."""
    return UpgradeStageReason(f"ClusterUpgrade{stage.capitalize()}{what}")
