"""The labels, annotations and pod conditions the sidecars write on Kubernetes objects, or read
from them, as a client of the cluster sees them."""

from __future__ import annotations

from typing import Final

PREFIX: Final = "slurm-sidecars.io/"

# labels
BUSY_LABEL: Final = PREFIX + "busy"  # =true on a worker pod running jobs (a PDB selects it)
CONTROL_PLANE_LABEL: Final = PREFIX + "control-plane"  # =leader on the Lease holder's pod only
UPGRADE_LABEL: Final = PREFIX + "upgrade"  # on the Jobs a whole-cluster upgrade runs (=cluster)
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "slurm-sidecars"

# annotations
UPGRADE_ANNOTATION: Final = PREFIX + "upgrade"  # on a Deployment a worker upgrade paused: the old hash
MAINTENANCE_ANNOTATION: Final = PREFIX + "maintenance"  # on a Node: a window asked for it
SLURM_NODE_NAME_ANNOTATION: Final = PREFIX + "slurm-node-name"  # on a Node: its worker's Slurm name
BACKUP_LOCATION_ANNOTATION: Final = PREFIX + "backup-location"  # where the backup Job writes its dump

# the worker pods' conditions: (type, the reason when True, the reason when False)
NODE_READY: Final = ("SlurmNodeReady", "SlurmReady", "SlurmNotReady")
NODE_DRAINED: Final = ("SlurmNodeDrained", "SlurmDrain", "SlurmNoDrain")
NODE_DOWN: Final = ("SlurmNodeDown", "SlurmDown", "SlurmUp")
CONDITIONS: Final = (NODE_READY, NODE_DRAINED, NODE_DOWN)
