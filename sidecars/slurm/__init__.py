"""The Slurm edge: commands, parsing and typed models. Nothing else in the package runs Slurm."""

from sidecars.slurm.client import RetryPolicy, SlurmClient
from sidecars.slurm.errors import (
    SlurmCommandError,
    SlurmError,
    SlurmFenced,
    SlurmParseError,
    SlurmTimeout,
    SlurmUnreachable,
)
from sidecars.slurm.models import (
    GPU_CHECK_REASON,
    REASON_PREFIX,
    BootTime,
    Job,
    JobNodes,
    JobPlacement,
    Node,
    NodeState,
    Partition,
    Ping,
    Reason,
    Reservation,
    Version,
)
from sidecars.slurm.runner import CommandResult, SlurmMetrics

__all__ = [
    "GPU_CHECK_REASON",
    "REASON_PREFIX",
    "BootTime",
    "CommandResult",
    "Job",
    "JobNodes",
    "JobPlacement",
    "Node",
    "NodeState",
    "Partition",
    "Ping",
    "Reason",
    "Reservation",
    "RetryPolicy",
    "SlurmClient",
    "SlurmCommandError",
    "SlurmError",
    "SlurmFenced",
    "SlurmMetrics",
    "SlurmParseError",
    "SlurmTimeout",
    "SlurmUnreachable",
    "Version",
]
