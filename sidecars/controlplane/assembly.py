"""The parts of the control plane that need the Kubernetes API, built from the settings: the
caches (pods, Nodes, ComputeDomains), what acts through them (recycling, upgrades, Node-annotated
windows), and the writers run after each refresh, in their declared order."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from sidecars.controlplane.changes import (
    BudgetedRoll,
    KubeClusterRoles,
    KubeRoleNames,
    Maintenance,
    NodeWindows,
    Upgrade,
    unavailable,
)
from sidecars.controlplane.fleet import (
    ComputeDomainCache,
    ControlPlaneMetrics,
    DrainBatcher,
    FleetView,
    NodeCache,
    PodCache,
    Workers,
)
from sidecars.controlplane.reconcile import (
    BusyLabeler,
    ClaimEvents,
    ConditionWriter,
    CordonSync,
    DeletionCostWriter,
    GpuFeatureSync,
    HealthSync,
    Reconciler,
    RecordKeeper,
    Recycler,
    SlinkySpecs,
    TopologySync,
    UnownedDrainEvents,
    UnownedPolicy,
)
from sidecars.controlplane.reconcile.deps import WriterDeps
from sidecars.controlplane.reconcile.round import PodEmit
from sidecars.controlplane.settings import ClusterUpgradeSettings, ControlPlaneSettings
from sidecars.kube import KubeClient, KubeEventSink, Pod
from sidecars.kube.cache import WatchCache
from sidecars.protocol.events import Reason
from sidecars.runtime.events import EventSink, EventType, LogEventSink
from sidecars.slurm import SlurmClient, running_releases

COMPONENT = "slurm-sidecars-control-plane"


@dataclass(frozen=True)
class Caches:
    """One list + watch each, shared by every part that reads them."""

    pods: PodCache
    nodes: NodeCache
    compute_domains: ComputeDomainCache | None  # only with --compute-domains (an optional CRD)

    @classmethod
    def build(cls, settings: ControlPlaneSettings, kube: KubeClient) -> Caches:
        wanted = settings.gpu.domain_features and settings.gpu.compute_domains
        return cls(
            PodCache(kube, settings.namespace, settings.worker_selector),
            NodeCache(kube),
            ComputeDomainCache(kube) if wanted else None,
        )

    def named(self) -> dict[str, WatchCache[Any]]:
        named: dict[str, WatchCache[Any] | None] = {
            "pods": self.pods,
            "nodes": self.nodes,
            "computedomains": self.compute_domains,
        }
        return {name: cache for name, cache in named.items() if cache is not None}


@dataclass(frozen=True)
class KubeSide:
    """What runs only with the Kubernetes API."""

    kube: KubeClient
    caches: Caches
    recycler: Recycler
    upgrade: Upgrade
    node_windows: NodeWindows
    # the control plane's own (on its pod): a slurmctld takeover, what concerns no live worker pod
    events: EventSink

    async def event_on(self, pod: Pod, reason: Reason, message: str, type: EventType = "Normal") -> None:
        await pod_event(self.kube, pod, reason, message, type)


async def pod_event(
    kube: KubeClient, pod: Pod, reason: Reason, message: str, type: EventType = "Normal"
) -> None:
    """An Event on a worker pod."""
    involved = {"kind": "Pod", "name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
    await KubeEventSink(kube, pod.namespace, involved, component=COMPONENT).emit(reason, message, type)


def kube_side(
    settings: ControlPlaneSettings,
    kube: KubeClient,
    caches: Caches,
    *,
    metrics: ControlPlaneMetrics,
    fleet: FleetView,
    drains: DrainBatcher,
    workers: Workers,
    maintenance: Maintenance,
) -> KubeSide:
    events: EventSink = (
        KubeEventSink(
            kube, settings.namespace, {"kind": "Pod", "name": settings.pod_name}, component=COMPONENT
        )
        if settings.pod_name
        else LogEventSink()
    )
    return KubeSide(
        kube,
        caches,
        Recycler(kube, metrics, events, workers.node_of, settings.recycle),
        Upgrade(
            kube,
            settings.namespace,
            drains,
            lambda: fleet.snapshot.nodes,
            lambda: fleet.snapshot.order,
            workers.held,
            workers.node_of,
            emit=functools.partial(pod_event, kube),
        ),
        NodeWindows(maintenance, caches.nodes, workers.held, workers.node_of),
        events,
    )


def cluster_roles(
    settings: ControlPlaneSettings, side: KubeSide, slurm: SlurmClient
) -> tuple[KubeClusterRoles | None, str]:
    """A whole-cluster upgrade's roles in Kubernetes: the workloads the settings name; or none, and
    the one line that names the settings missing."""
    names, missing = upgrade_role_names(settings.upgrade, settings.namespace, settings.pod_name)
    if names is None:
        return None, unavailable(missing)
    roll = BudgetedRoll(
        side.upgrade,
        settings.upgrade.worker_budget,
        lambda: running_releases(slurm, names.upgrade.slurmctld_statefulset),
    )
    return KubeClusterRoles(names, side.kube, lambda: slurm, roll), ""


def upgrade_role_names(
    upgrade: ClusterUpgradeSettings, namespace: str, own_pod: str
) -> tuple[KubeRoleNames | None, list[str]]:
    """What a whole-cluster upgrade moves, as the settings name it; or none, and the flags missing."""
    u = upgrade
    missing = [
        flag
        for flag, given in (
            ("--upgrade-slurmdbd-workload", u.slurmdbd_workload),
            ("--upgrade-slurmctld-statefulset", u.slurmctld_statefulset),
            ("--upgrade-state-image", u.state_image),
            ("--upgrade-backup-job-configmap", u.backup_job_configmap or u.without_database_backup),
        )
        if not given
    ]
    if missing or u.slurmdbd_workload is None:
        return None, missing
    names = KubeRoleNames(namespace=namespace, upgrade=u, own_pod=own_pod)
    return names, []


def writers(
    settings: ControlPlaneSettings,
    side: KubeSide,
    *,
    slurm: SlurmClient,
    metrics: ControlPlaneMetrics,
    drains: DrainBatcher,
    workers: Workers,
    emit: PodEmit,
) -> list[Reconciler]:
    """The writers the settings turn on, in the order they run: the busy label first (it is what
    keeps jobs from eviction), then the claims' Events, deletion costs, recycling, node records,
    cordons, health signals, pod conditions, GPU features, topology, and in Slinky mode the operator's
    topology and features annotations."""
    s = settings
    deps = WriterDeps(
        kube=side.kube,
        slurm=slurm,
        nodes=side.caches.nodes,
        domains=side.caches.compute_domains,
        drains=drains,
        node_of=workers.node_of,
        metrics=metrics,
        emit=emit,
        events=side.events,
        namespace=s.namespace,
        slinky_mode=s.slinky_mode,
    )
    out: list[Reconciler] = []
    if s.busy.label:
        out.append(BusyLabeler(deps, s.busy))
    out.append(ClaimEvents(workers.claims, emit))
    out.append(UnownedDrainEvents(deps))
    out.append(DeletionCostWriter(deps, qps=s.deletion_cost_qps, held=side.upgrade.deployment.cost))
    out.append(side.recycler)
    if s.unowned.drain_policy:  # capped by the recycler's own window and fraction
        out.append(UnownedPolicy(deps, side.recycler, s.unowned))
    if s.records.cleanup:
        out.append(RecordKeeper(deps, policy=s.records))
    if s.cordons.sync:
        out.append(CordonSync(deps, s.cordons))
    if s.health.conditions or s.health.taints:
        out.append(HealthSync(deps, s.health))
    if s.conditions.enabled:
        out.append(ConditionWriter(deps, s.conditions))
    gpu_features = s.gpu.domain_features
    if gpu_features:
        out.append(GpuFeatureSync(deps))
    spec = s.topology.spec
    if spec is not None:
        out.append(TopologySync(deps, spec, settings=s.topology))
    if (spec is not None or gpu_features) and s.slinky_mode is not False:
        out.append(SlinkySpecs(deps, topology=spec, gpu_features=gpu_features))
    return out
