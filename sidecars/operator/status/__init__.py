"""`slurm-sidecars status`: what a person wants to see at a glance, as plain tables.

Nodes and their states, jobs, drains in progress, the scale-in order (from the control plane, or
straight from Slurm when no control plane is named) and the config generation with the last
rejection (from config-sync's `/status`). A source that cannot be reached is named on stderr and
makes the exit status 1; whatever could be read is still printed.
"""

from sidecars.operator.status.collect import collect
from sidecars.operator.status.main import configure, main
from sidecars.operator.status.render import render, when
from sidecars.operator.status.report import JobRow, NodeRow, StatusReport
from sidecars.operator.status.settings import StatusSettings

__all__ = [
    "JobRow",
    "NodeRow",
    "StatusReport",
    "StatusSettings",
    "collect",
    "configure",
    "main",
    "render",
    "when",
]
