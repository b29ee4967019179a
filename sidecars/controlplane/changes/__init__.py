"""The operator-started long work: maintenance windows (from the API or Node annotations) and
rolling upgrades (a StatefulSet's revision or a Deployment's paced roll), each draining first."""

from sidecars.controlplane.changes.maintenance import Maintenance, WindowError
from sidecars.controlplane.changes.node_windows import NodeWindows
from sidecars.controlplane.changes.upgrade import Upgrade

__all__ = ["Maintenance", "NodeWindows", "Upgrade", "WindowError"]
