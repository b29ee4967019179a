"""The Slurm daemons whose files config-sync can keep, by their program names (`--daemon`)."""

from __future__ import annotations

SLURMCTLD = "slurmctld"
SLURMDBD = "slurmdbd"
DAEMONS = (SLURMCTLD, SLURMDBD)
