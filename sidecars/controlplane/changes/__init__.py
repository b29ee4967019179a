"""The operator-started long work: maintenance windows (from the API or Node annotations) and
rolling upgrades (a StatefulSet's revision or a Deployment's paced roll), each draining first, and
a whole-cluster upgrade in Slurm's order."""

from sidecars.controlplane.changes.cluster_roles.kube import (
    KubeClusterRoles,
    KubeRoleNames,
    unavailable,
)
from sidecars.controlplane.changes.cluster_roles.kube_roll import BudgetedRoll
from sidecars.controlplane.changes.cluster_upgrade.events import StageEvents
from sidecars.controlplane.changes.cluster_upgrade.run import (
    ClusterUpgradeMetrics,
    ClusterUpgrades,
)
from sidecars.controlplane.changes.cluster_upgrade.store import ConfigMapStore, FileStore, signing_key
from sidecars.controlplane.changes.maintenance import Maintenance, WindowError
from sidecars.controlplane.changes.node_windows import NodeWindows
from sidecars.controlplane.changes.upgrade import Upgrade

__all__ = [
    "BudgetedRoll",
    "ClusterUpgradeMetrics",
    "ClusterUpgrades",
    "ConfigMapStore",
    "FileStore",
    "KubeClusterRoles",
    "KubeRoleNames",
    "Maintenance",
    "NodeWindows",
    "StageEvents",
    "Upgrade",
    "WindowError",
    "signing_key",
    "unavailable",
]
