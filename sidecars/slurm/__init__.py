"""The Slurm edge: commands, parsing and typed models. Nothing else in the package runs Slurm."""

from sidecars.slurm.client import SlurmClient
from sidecars.slurm.commands import RetryPolicy
from sidecars.slurm.dbd_version import parse_dbd_version, slurmdbd_version
from sidecars.slurm.errors import (
    SlurmCommandError,
    SlurmError,
    SlurmFenced,
    SlurmParseError,
    SlurmTimeout,
    SlurmUnreachable,
)
from sidecars.slurm.models import (
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
from sidecars.slurm.primary import Controllers, Takeover
from sidecars.slurm.releases import running_releases
from sidecars.slurm.runner import CommandResult, SlurmMetrics

__all__ = [
    "BootTime",
    "CommandResult",
    "Controllers",
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
    "Takeover",
    "Version",
    "parse_dbd_version",
    "running_releases",
    "slurmdbd_version",
]
