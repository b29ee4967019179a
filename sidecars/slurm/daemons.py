"""The Slurm daemons by their program names: what config-sync keeps files for (`--daemon`), and the
roles a whole-cluster upgrade moves in Slurm's order. Named here, at the Slurm edge, so no other
module spells a Slurm program."""

from __future__ import annotations

SLURMCTLD = "slurmctld"
SLURMDBD = "slurmdbd"
SLURMD = "slurmd"
SLURMRESTD = "slurmrestd"
DAEMONS = (SLURMCTLD, SLURMDBD, SLURMRESTD)  # config-sync's --daemon
UPGRADE_ORDER = (SLURMDBD, SLURMCTLD, SLURMD)  # Slurm's own rule: accounting first, workers last
ACCOUNTING_SLURMDBD = "accounting_storage/slurmdbd"  # AccountingStorageType of a cluster with slurmdbd
