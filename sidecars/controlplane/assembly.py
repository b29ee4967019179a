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
    RecordPolicy,
    RecyclePolicy,
    Recycler,
    Signals,
    SlinkySpecs,
    TopologySync,
    UnownedDrainEvents,
    UnownedPolicy,
    UnownedPolicySettings,
)
from sidecars.controlplane.reconcile.round import PodEmit
from sidecars.controlplane.settings import ControlPlaneSettings
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
        wanted = settings.gpu_domain_features and settings.compute_domains
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
    policy = RecyclePolicy(
        grace_seconds=settings.recycle_grace_seconds,
        window_seconds=settings.recycle_window_seconds,
        fraction=settings.recycle_fraction,
        backoff_seconds=settings.recycle_backoff_seconds,
        backoff_max_seconds=settings.recycle_backoff_max_seconds,
    )
    return KubeSide(
        kube,
        caches,
        Recycler(kube, metrics, events, workers.node_of, policy),
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
    names, missing = upgrade_role_names(settings)
    if names is None:
        return None, unavailable(missing)
    roll = BudgetedRoll(
        side.upgrade,
        settings.upgrade_worker_budget,
        lambda: running_releases(slurm, names.slurmctld_statefulset),
    )
    return KubeClusterRoles(names, side.kube, lambda: slurm, roll), ""


def upgrade_role_names(settings: ControlPlaneSettings) -> tuple[KubeRoleNames | None, list[str]]:
    """What a whole-cluster upgrade moves, as the settings name it; or none, and the flags missing."""
    s = settings
    missing = [
        flag
        for flag, given in (
            ("--upgrade-slurmdbd-workload", s.upgrade_slurmdbd_workload),
            ("--upgrade-slurmctld-statefulset", s.upgrade_slurmctld_statefulset),
            ("--upgrade-state-image", s.upgrade_state_image),
            (
                "--upgrade-backup-job-configmap",
                s.upgrade_backup_job_configmap or s.upgrade_without_database_backup,
            ),
        )
        if not given
    ]
    if missing or s.upgrade_slurmdbd_workload is None:
        return None, missing
    kind, name = s.upgrade_slurmdbd_workload
    names = KubeRoleNames(
        namespace=s.namespace,
        slurmdbd_kind=kind,
        slurmdbd_name=name,
        slurmdbd_container=s.upgrade_slurmdbd_container,
        slurmctld_statefulset=s.upgrade_slurmctld_statefulset,
        slurmctld_container=s.upgrade_slurmctld_container,
        state_image=s.upgrade_state_image,
        backup_configmap=s.upgrade_backup_job_configmap,
        without_backup=s.upgrade_without_database_backup,
        rollout_timeout_seconds=s.upgrade_rollout_timeout_seconds,
        job_timeout_seconds=s.upgrade_job_timeout_seconds,
        own_pod=s.pod_name,
    )
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
    s, kube, node_of = settings, side.kube, workers.node_of
    out: list[Reconciler] = []
    if s.busy_label:
        out.append(BusyLabeler(kube, node_of, qps=s.busy_label_qps, release_seconds=s.busy_release_seconds))
    out.append(ClaimEvents(workers.claims, emit))
    out.append(UnownedDrainEvents(node_of, emit, side.events))
    upgrade = side.upgrade
    out.append(
        DeletionCostWriter(
            kube,
            metrics,
            qps=s.deletion_cost_qps,
            node_of=node_of,
            held=upgrade.deployment.cost,
            slinky_mode=s.slinky_mode,
        )
    )
    out.append(side.recycler)
    if s.unowned_drain_policy:
        policy = UnownedPolicySettings(
            settle_seconds=s.unowned_settle_seconds,
            window_seconds=s.recycle_window_seconds,
            fraction=s.recycle_fraction,
        )
        out.append(UnownedPolicy(slurm, side.recycler, node_of, emit, policy))
    if s.record_cleanup:
        records = RecordPolicy(grace_seconds=s.record_grace_seconds, per_pass=s.record_deletes_per_pass)
        out.append(
            RecordKeeper(
                slurm, drains, node_of, metrics, side.events, emit, namespace=s.namespace, policy=records
            )
        )
    if s.cordon_sync:
        out.append(
            CordonSync(
                kube,
                side.caches.nodes,
                drains,
                node_of,
                taint_keys=s.cordon_taints,
                slinky_mode=s.slinky_mode,
            )
        )
    if s.health_conditions or s.health_taints:
        out.append(
            HealthSync(
                side.caches.nodes,
                drains,
                node_of,
                metrics,
                emit,
                Signals(s.health_conditions, s.health_taints),
                settle_seconds=s.health_settle_seconds,
                max_fraction=s.health_max_fraction,
                slinky_mode=s.slinky_mode,
            )
        )
    if s.pod_conditions:
        out.append(
            ConditionWriter(
                kube,
                node_of,
                qps=s.condition_qps,
                settle_seconds=s.condition_settle_seconds,
                slinky_mode=s.slinky_mode,
            )
        )
    if s.gpu_domain_features:
        out.append(
            GpuFeatureSync(
                slurm, side.caches.nodes, node_of, side.caches.compute_domains, slinky_mode=s.slinky_mode
            )
        )
    if s.topology is not None:
        out.append(
            TopologySync(
                kube,
                slurm,
                side.caches.nodes,
                node_of,
                s.topology,
                namespace=s.namespace,
                configmap=s.topology_configmap,
                settle_seconds=s.topology_settle_seconds,
                slinky_mode=s.slinky_mode,
            )
        )
    if (s.topology is not None or s.gpu_domain_features) and s.slinky_mode is not False:
        out.append(
            SlinkySpecs(
                kube,
                side.caches.nodes,
                slinky_mode=s.slinky_mode,
                topology=s.topology,
                gpu_features=s.gpu_domain_features,
                domains=side.caches.compute_domains,
            )
        )
    return out
