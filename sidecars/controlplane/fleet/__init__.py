"""What the control plane knows: the fleet read from Slurm (snapshot, scale-in ranking), the
worker pods and Kubernetes Nodes it watches and which pod is which Slurm node (claims), the
drains it batches and those in progress, the agents' slurmd releases, and its metrics."""

from sidecars.controlplane.fleet.claims import Claims, RefusedClaim
from sidecars.controlplane.fleet.compute_domains import ComputeDomainCache
from sidecars.controlplane.fleet.controllers import ControllerWatch
from sidecars.controlplane.fleet.drain_clock import DrainClock
from sidecars.controlplane.fleet.drains import DrainBatcher, DrainRequest, Written
from sidecars.controlplane.fleet.holder_label import HolderLabel
from sidecars.controlplane.fleet.kube_nodes import NodeCache
from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.controlplane.fleet.pods import PodCache
from sidecars.controlplane.fleet.snapshot import FleetNode, FleetSnapshot, FleetView
from sidecars.controlplane.fleet.versions import AgentVersions
from sidecars.controlplane.fleet.workers import Workers

__all__ = [
    "AgentVersions",
    "Claims",
    "ComputeDomainCache",
    "ControlPlaneMetrics",
    "ControllerWatch",
    "DrainBatcher",
    "DrainClock",
    "DrainRequest",
    "FleetNode",
    "FleetSnapshot",
    "FleetView",
    "HolderLabel",
    "NodeCache",
    "PodCache",
    "RefusedClaim",
    "Workers",
    "Written",
]
