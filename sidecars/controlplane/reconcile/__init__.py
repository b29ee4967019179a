"""The writers run after each refresh (leader only), each behind `Reconciler.reconcile(view)`,
run in one declared order by `Round`."""

from sidecars.controlplane.reconcile.busy_label import BusyLabeler
from sidecars.controlplane.reconcile.claim_events import ClaimEvents
from sidecars.controlplane.reconcile.cordons import CordonSync
from sidecars.controlplane.reconcile.deletion_cost import DeletionCostWriter
from sidecars.controlplane.reconcile.gpu_features import GpuFeatureSync
from sidecars.controlplane.reconcile.health_signals import HealthSync, Signals
from sidecars.controlplane.reconcile.pod_conditions import ConditionWriter
from sidecars.controlplane.reconcile.records import RecordKeeper
from sidecars.controlplane.reconcile.recycle import Recycler
from sidecars.controlplane.reconcile.round import Outcome, Reconciler, Round, View
from sidecars.controlplane.reconcile.slinky_specs import SlinkySpecs
from sidecars.controlplane.reconcile.topology_sync import TopologySync
from sidecars.controlplane.reconcile.unowned_events import UnownedDrainEvents
from sidecars.controlplane.reconcile.unowned_policy import UnownedPolicy

__all__ = [
    "BusyLabeler",
    "ClaimEvents",
    "ConditionWriter",
    "CordonSync",
    "DeletionCostWriter",
    "GpuFeatureSync",
    "HealthSync",
    "Outcome",
    "Reconciler",
    "RecordKeeper",
    "Recycler",
    "Round",
    "Signals",
    "SlinkySpecs",
    "TopologySync",
    "UnownedDrainEvents",
    "UnownedPolicy",
    "View",
]
