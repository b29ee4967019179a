"""The control plane assembled: refresh loop, act loop (leader only), drains, leader election, HTTP."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from sidecars.controlplane import settings as cp_settings
from sidecars.controlplane.changes.maintenance import Maintenance
from sidecars.controlplane.changes.node_windows import NodeWindows
from sidecars.controlplane.changes.upgrade import Upgrade
from sidecars.controlplane.fleet.claims import Claims
from sidecars.controlplane.fleet.drains import DrainBatcher
from sidecars.controlplane.fleet.kube_nodes import NodeCache
from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.controlplane.fleet.pods import PodCache
from sidecars.controlplane.fleet.snapshot import FleetView
from sidecars.controlplane.fleet.versions import AgentVersions
from sidecars.controlplane.http import planned
from sidecars.controlplane.http.access import Access
from sidecars.controlplane.http.api import ControlPlaneAPI
from sidecars.controlplane.http.config_feed import ConfigFeed
from sidecars.controlplane.http.maintenance_api import MaintenanceAPI
from sidecars.controlplane.http.page import DrainClock, PageState
from sidecars.controlplane.http.upgrade_api import UpgradeAPI
from sidecars.controlplane.http.upgrade_api import unavailable as upgrade_unavailable
from sidecars.controlplane.http.web import WebUI
from sidecars.controlplane.leader import LeaderElector
from sidecars.controlplane.reconcile.busy_label import BusyLabeler
from sidecars.controlplane.reconcile.cordons import CordonSync
from sidecars.controlplane.reconcile.deletion_cost import DeletionCostWriter
from sidecars.controlplane.reconcile.gpu_features import ComputeDomainCache, GpuDomainSync
from sidecars.controlplane.reconcile.pod_conditions import ConditionWriter
from sidecars.controlplane.reconcile.recycle import RecyclePolicy, Recycler
from sidecars.controlplane.reconcile.topology_sync import TopologySync
from sidecars.controlplane.settings import ControlPlaneSettings
from sidecars.kube import KubeClient, KubeEventSink, Pod, load_configuration
from sidecars.kube.cache import WatchCache
from sidecars.kube.nodename import Named, NodeNaming, slurm_node_name
from sidecars.runtime import daemon, http, logs
from sidecars.runtime.events import EventSink, EventType, LogEventSink
from sidecars.runtime.health import CheckResult, Checks
from sidecars.runtime.tasks import RootTasks, until_stopped
from sidecars.runtime.waits import until_set
from sidecars.slurm import SlurmClient, SlurmError, SlurmMetrics

log = structlog.get_logger(__name__)
STATUS = frozenset({"/status"})


class ControlPlane:
    """`async with ControlPlane(settings, slurm, kube).running() as port:` serves until the block ends."""

    def __init__(
        self,
        settings: ControlPlaneSettings,
        slurm: SlurmClient,
        kube: KubeClient | None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        if slurm.metrics is None:
            slurm.metrics = SlurmMetrics(self.registry)
        self.slurm = slurm
        self.kube = kube
        self.metrics = ControlPlaneMetrics(self.registry)
        self.draining: set[str] = set()  # nodes we drained that still run work: refresh fast
        self._refresh_now = asyncio.Event()
        self._refreshed = asyncio.Event()
        self.fleet = FleetView(slurm, brief_jobs=settings.brief_jobs)
        self.drains = DrainBatcher(
            slurm,
            self.metrics,
            window=settings.batch_window_seconds,
            on_written=self._written,
            may_write=lambda: self.leader.is_leader,
        )
        self.leader = LeaderElector(
            kube,
            settings.namespace,
            settings.lease_name,
            settings.identity,
            lease_seconds=settings.lease_seconds,
            renew_seconds=settings.renew_seconds,
            on_change=self._leadership,
        )
        if kube is not None:  # every write, at each attempt, asks the Lease (fencing)
            kube.fence = lambda: self.leader.is_leader
            slurm.fence = lambda: self.leader.is_leader
        self.tasks = RootTasks()
        self.pods: PodCache | None = None
        self.costs: DeletionCostWriter | None = None
        self.recycler: Recycler | None = None
        self.kube_nodes: NodeCache | None = None  # one Node list + watch, made by its first reader
        self.naming = NodeNaming(settings.node_name_from, settings.node_label, settings.node_name_annotation)
        if kube is not None and self.naming.source == "kube-node":
            self._node_cache(kube)  # the Slurm node names come from the Nodes
        self.claims = Claims(self.name_of, enforce=self.naming.source == "kube-node")
        self.cordons: CordonSync | None = None
        if kube is not None and settings.cordon_sync:
            self.cordons = CordonSync(
                kube, self._node_cache(kube), self.drains, self.node_of, taint_keys=settings.cordon_taints
            )
        self.gpu_domains: GpuDomainSync | None = None
        self.compute_domains: ComputeDomainCache | None = None
        if kube is not None and settings.gpu_domain_features:
            if settings.compute_domains:
                self.compute_domains = ComputeDomainCache(kube)
            self.gpu_domains = GpuDomainSync(
                slurm, self._node_cache(kube), self.node_of, self.compute_domains
            )
        self.conditions: ConditionWriter | None = None
        if kube is not None and settings.pod_conditions:
            self.conditions = ConditionWriter(
                kube,
                self.node_of,
                qps=settings.condition_qps,
                settle=settings.condition_settle_seconds,
            )
        self.busy: BusyLabeler | None = None
        if kube is not None and settings.busy_label:
            self.busy = BusyLabeler(
                kube, self.node_of, qps=settings.busy_label_qps, release=settings.busy_release_seconds
            )
        self.topology: TopologySync | None = None
        if kube is not None and settings.topology is not None:
            self.topology = TopologySync(
                kube,
                slurm,
                self._node_cache(kube),
                self.node_of,
                settings.topology,
                namespace=settings.namespace,
                configmap=settings.topology_configmap,
                settle=settings.topology_settle_seconds,
            )
        if kube is not None:
            self.pods = PodCache(kube, settings.namespace, settings.worker_selector)
            self.costs = DeletionCostWriter(
                kube,
                self.metrics,
                qps=settings.deletion_cost_qps,
                node_of=self.node_of,
                held=lambda pod: self.upgrade.deployment.cost(pod) if self.upgrade else None,
            )
            events: EventSink = (
                KubeEventSink(
                    kube,
                    settings.namespace,
                    {"kind": "Pod", "name": settings.pod_name},
                    component="slurm-sidecars-control-plane",
                )
                if settings.pod_name
                else LogEventSink()
            )
            self.recycler = Recycler(
                kube,
                self.metrics,
                events,
                self.node_of,
                RecyclePolicy(
                    grace_seconds=settings.recycle_grace_seconds,
                    window_seconds=settings.recycle_window_seconds,
                    fraction=settings.recycle_fraction,
                    backoff_seconds=settings.recycle_backoff_seconds,
                    backoff_max_seconds=settings.recycle_backoff_max_seconds,
                ),
            )
        self._pod_index: tuple[int, dict[tuple[str, str], str]] = (-1, {})  # see node_of
        self.maintenance = Maintenance(
            slurm, self.drains, lambda: self.fleet.snapshot.nodes, emit=self._pod_event if kube else None
        )
        self.maintenance_api = MaintenanceAPI(self.maintenance, self.leader)
        self.node_windows: NodeWindows | None = None
        if kube is not None and self.pods is not None:
            self.node_windows = NodeWindows(
                self.maintenance, self._node_cache(kube), self.worker_pods, self.node_of
            )
        self.upgrade: Upgrade | None = None
        if kube is not None and self.pods is not None:
            self.upgrade = Upgrade(
                kube,
                settings.namespace,
                self.drains,
                lambda: self.fleet.snapshot.nodes,
                lambda: self.fleet.snapshot.order,
                self.worker_pods,
                self.node_of,
                emit=self._event_on,
            )
        self.versions = AgentVersions()  # the slurmd releases the agents report
        why_no_upgrade = upgrade_unavailable(settings.kubernetes)
        self.upgrade_api = UpgradeAPI(
            self.upgrade, slurm, self.leader, self.versions, lambda: self.fleet.snapshot.nodes, why_no_upgrade
        )
        self.access = Access(
            settings.token,
            settings.viewer_token,
            review=kube.review_token if kube is not None else None,
            audience=settings.agent_audience,
            locate=self.agent_node,
            refused=lambda identity, status: self.metrics.api_refusals.labels(identity, str(status)).inc(),
        )
        self.api = ControlPlaneAPI(
            self.access,
            fleet=self.fleet,
            drains=self.drains,
            recycler=self.recycler,
            leadership=self.leader,
            metrics=self.metrics,
            max_wait=settings.max_wait_seconds,
            versions=self.versions,
        )
        # the operator's page (/ui/): its own read-only credential, config-sync's part read from it
        self.drain_clock = DrainClock()
        self.config_feed = ConfigFeed(settings.config_sync, token=settings.viewer_token)
        self.page = PageState(
            self.fleet,
            config=self.config_feed,
            drains=self.drain_clock,
            cluster=self._page_cluster,
            unregistered_pods=self._unregistered_pods,
            sections={
                "maintenance": lambda: planned.maintenance_rows(self.maintenance),
                "upgrade": lambda: planned.upgrade_rows(self.upgrade, why_no_upgrade),
            },
        )
        self.config_feed.on_change = self.page.touch
        self.web = WebUI(settings.viewer_token, self.page)

    def _leadership(self, lead: bool) -> None:
        self.metrics.leader.set(1 if lead else 0)
        if lead and self.upgrade is not None:  # called from the Lease's task: made by then
            self.upgrade.forget()  # another replica may have written the plan while this one followed

    def caches(self) -> dict[str, WatchCache[Any]]:
        """The Kubernetes caches this replica keeps, by name (readiness and metrics say when stale)."""
        named: dict[str, WatchCache[Any] | None] = {
            "pods": self.pods,
            "nodes": self.kube_nodes,
            "computedomains": self.compute_domains,
        }
        return {name: cache for name, cache in named.items() if cache is not None}

    def _watch_metrics(self) -> None:
        for name, cache in self.caches().items():
            self.metrics.kube_cache_stale.labels(name).set_function(functools.partial(_stale, cache))
            self.metrics.kube_cache_relists.labels(name).set_function(functools.partial(_relists, cache))

    def _node_cache(self, kube: KubeClient) -> NodeCache:
        """The one Node cache, shared by every feature that reads Nodes (each with its own rule)."""
        if self.kube_nodes is None:
            self.kube_nodes = NodeCache(kube)
        return self.kube_nodes

    def _page_cluster(self) -> dict[str, Any]:
        status = self.status()
        return {k: status[k] for k in status if k not in {"drains_pending", "draining"}}

    def _unregistered_pods(self) -> list[dict[str, Any]]:
        rec = self.recycler
        if rec is None:
            return []
        return [
            {"namespace": ns, "pod": pod, "detail": r.detail} for (ns, pod), r in sorted(rec.reports.items())
        ]

    def name_of(self, pod: Pod) -> Named:
        """The pod's Slurm node: the node whose Comment names this pod (Slinky writes it), else the
        rule the agents use too (kube.nodename: host name or label, or the Kubernetes Node)."""
        snap = self.fleet.snapshot
        if self._pod_index[0] != snap.version:  # built once per snapshot, not once per pod
            index = {(v.pod.namespace, v.pod.pod_name): v.name for v in snap.nodes.values() if v.pod}
            self._pod_index = (snap.version, index)
        found = self._pod_index[1].get((pod.namespace, pod.name))
        if found:
            return Named(found, "the node's Comment")
        host = self.kube_nodes.nodes.get(pod.node_name) if self.kube_nodes and pod.node_name else None
        if self.naming.source == "kube-node" and pod.node_name and host is None:
            # its annotation (an override) is unknown: no guess that could claim another's node
            return Named(None, f"Kubernetes node {pod.node_name} not found")
        return slurm_node_name(
            self.naming,
            pod_name=pod.name,
            pod_hostname=pod.hostname,
            pod_labels=pod.labels,
            kube_node=pod.node_name,
            node_annotations=host.annotations if host else None,
        )

    def node_of(self, pod: Pod) -> str:
        return self.name_of(pod).name or ""

    def agent_node(self, namespace: str, name: str, uid: str) -> str | None:
        """The Slurm node of the worker pod an agent's token is bound to: "" when that pod is none
        of ours (another namespace, not a worker, an earlier incarnation, refused its claim), None
        while the pods are not listed yet."""
        if self.pods is None or namespace != self.settings.namespace:
            return ""
        if not self.pods.synced.is_set() or not self.naming_ready:
            return None
        pod = self.pods.pods.get(name)
        if pod is None or pod.uid != uid or pod.uid in self.claims.refused:
            return ""
        return self.node_of(pod)

    @property
    def naming_ready(self) -> bool:
        """Names from the Nodes need the Node cache listed first (else every pod looks unnamed)."""
        if self.naming.source != "kube-node":
            return True
        return self.kube_nodes is not None and self.kube_nodes.synced.is_set()

    def worker_pods(self) -> list[Pod]:
        """The worker pods that hold their Slurm node (one each); conflicts are set aside (claims)."""
        if self.pods is None:
            return []
        return self.claims.resolve(self.pods.pods.values())

    async def _pod_event(self, node: str, reason: str, message: str) -> None:
        """An Event on the worker pod of a Slurm node (none when no pod runs it)."""
        if self.pods is not None:
            pod = next((p for p in self.worker_pods() if self.node_of(p) == node), None)
            if pod is not None:
                await self._event_on(pod, reason, message)

    async def _event_on(self, pod: Pod, reason: str, message: str, type: EventType = "Normal") -> None:
        if self.kube is not None:
            involved = {"kind": "Pod", "name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
            sink = KubeEventSink(self.kube, pod.namespace, involved, component="slurm-sidecars-control-plane")
            await sink.emit(reason, message, type)

    def _written(self, names: set[str]) -> None:
        self.draining |= names
        self.drain_clock.written(names)
        if self.cordons is not None:
            self.cordons.written(names)
        self._refresh_now.set()

    # ------------------------------------------------------------------ loops
    async def refresh_loop(self) -> None:
        while True:
            started = time.monotonic()
            try:
                snap = await self.fleet.refresh()
                self.metrics.refreshes.labels("ok").inc()
                self.metrics.refresh_seconds.observe(time.monotonic() - started)
                self.metrics.observe(snap)
                self.drain_clock.observe(snap)
                self.draining = {
                    n for n in self.draining if n in snap.nodes and snap.nodes[n].drain and snap.nodes[n].busy
                }
            except SlurmError:
                self.metrics.refreshes.labels("error").inc()
            self._refreshed.set()
            fast = self.draining or self.drains.pending
            interval = self.settings.fast_interval_seconds if fast else self.settings.interval_seconds
            self._refresh_now.clear()
            await until_set(self._refresh_now, interval)

    async def act_loop(self) -> None:
        """After each refresh, the leader writes deletion costs and recycles; failures wait for the next."""
        while True:
            await self._refreshed.wait()
            self._refreshed.clear()
            if not self.leader.is_leader or self.pods is None or not self.pods.synced.is_set():
                continue
            if not self.naming_ready:
                continue
            pods = self.worker_pods()
            snap = self.fleet.snapshot
            try:
                if self.busy is not None and snap.loaded:  # first: it is what keeps jobs from eviction
                    await self.busy.sync(pods, snap)
                for refused in self.claims.to_report():
                    await self._event_on(refused.pod, "SlurmNodeClaimRefused", refused.message(), "Warning")
                if self.costs is not None and snap.loaded:
                    await self.costs.sync(pods, snap)
                if self.recycler is not None:
                    await self.recycler.cycle(pods, snap)
                if self.cordons is not None and self.cordons.ready and snap.loaded:
                    await self.cordons.cycle(pods, snap)
                if self.conditions is not None and snap.loaded:
                    await self.conditions.sync(pods, snap)
                if self.gpu_domains is not None and self.gpu_domains.ready and snap.loaded:
                    await self.gpu_domains.cycle(pods, snap)
                if self.topology is not None and self.topology.ready and snap.loaded:
                    await self.topology.cycle(pods, snap)
            except Exception as exc:  # a Kubernetes hiccup must not end the loop
                log.warning("act_failed", error=str(exc))

    async def maintenance_loop(self) -> None:
        """Every interval: windows read from Slurm (every replica reports them), acted on by the leader."""
        shown: list[Any] = []  # the windows the page last showed: a new or gone one wakes its readers
        while True:
            try:
                if self.leader.is_leader and self.fleet.snapshot.loaded:
                    synced = self.pods is not None and self.pods.synced.is_set() and self.naming_ready
                    if self.node_windows is not None and synced:
                        await self.node_windows.sync()
                    await self.maintenance.reconcile()
                else:
                    await self.maintenance.read()
                for state, count in self.maintenance.counts().items():
                    self.metrics.maintenance_nodes.labels(state).set(count)
            except SlurmError as exc:
                self.maintenance.read_error = exc.message
                log.warning("maintenance_read_failed", error=exc.message)
            if self.maintenance.windows != shown:
                shown = list(self.maintenance.windows)
                self.page.touch()
            await asyncio.sleep(self.settings.interval_seconds)

    async def upgrade_loop(self) -> None:
        """Every interval, the leader moves a started upgrade on by one step (the plan read once per
        term as leader, not every interval: it is the leader's own to write; see _leadership)."""
        while True:
            await asyncio.sleep(self.settings.interval_seconds)
            ready = (
                self.pods is not None
                and self.pods.synced.is_set()
                and self.fleet.snapshot.loaded
                and self.naming_ready
            )
            if self.upgrade is None or not self.leader.is_leader or not ready:
                continue
            try:
                await self.upgrade.step()
            except Exception as exc:  # a Kubernetes hiccup must not end the loop
                log.warning("upgrade_step_failed", error=str(exc))

    async def drain_loop(self) -> None:
        await self.drains.run()

    # ------------------------------------------------------------------ face
    def status(self) -> dict[str, Any]:
        snap = self.fleet.snapshot
        rec = self.recycler
        return {
            "version": snap.version,
            "nodes": len(snap.nodes),
            "jobs": len(snap.jobs),
            "read_at": snap.taken_at or None,
            "slurm_reachable": snap.reachable,
            "slurm_error": snap.error,
            "leader": self.leader.is_leader,
            "lease_holder": self.leader.holder,
            "identity": self.settings.identity,
            "kubernetes": self.kube is not None,
            "drains_pending": sorted(self.drains.pending),
            "draining": sorted(self.draining),
            "maintenance": {
                "windows": [
                    {"name": w.name, "nodes": len(w.nodes), "active": w.active(time.time())}
                    for w in self.maintenance.windows
                ],
                "nodes": self.maintenance.counts(),
                "error": self.maintenance.read_error,
            },
            "refused_pods": [r.as_json() for r in self.claims.refused.values()],
            "topology": None if self.topology is None else self.topology.status(),
            "recycling": None
            if rec is None
            else {"suspended": rec.suspended, "recent": list(rec.recent), "in_window": len(rec.deleted_at)},
        }

    def http_app(self) -> Any:
        liveness, readiness = Checks(), Checks()
        stale_after = max(30.0, 10 * self.settings.interval_seconds)

        def ticking() -> CheckResult:
            age = time.monotonic() - self.fleet.last_attempt
            return CheckResult(age < stale_after, f"last Slurm read attempt {age:.1f}s ago")

        def loaded() -> CheckResult:
            snap = self.fleet.snapshot
            return CheckResult(snap.loaded, f"version {snap.version}" if snap.loaded else f"{snap.error}")

        liveness.add("root_tasks", self.tasks.check)
        liveness.add("refresh_loop", ticking)
        readiness.add("fleet_view", loaded)
        for name, cache in self.caches().items():
            if name != "computedomains":  # an optional CRD, maybe not installed: its metric says it
                readiness.add(f"{name}_cache", functools.partial(_cache_check, cache))
        app = http.DaemonHTTP(self.registry, liveness, readiness, self.status).app(
            client_max_size=16 * 1024, limits=self.settings.http_limits
        )
        # /status names nodes, pods and the Lease holder: the viewer's or the operator's to read
        readers = (self.settings.token, *filter(None, [self.settings.viewer_token]))
        app.middlewares.append(http.bearer_required(STATUS, *readers, who="the viewer's or the operator's"))
        self.api.install(app)
        self.maintenance_api.install(app)
        self.upgrade_api.install(app)
        self.web.install(app)
        return app

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[int]:
        """Serve for the duration of the block; `until_stopped(stop, plane.tasks)` inside it raises
        when one of the root tasks ends on its own."""
        stop = asyncio.Event()
        self._watch_metrics()
        self.fleet.last_attempt = time.monotonic()
        self.tasks.start("refresh_loop", self.refresh_loop())
        self.tasks.start("drain_loop", self.drain_loop())
        self.tasks.start("act_loop", self.act_loop())
        self.tasks.start("leader", self.leader.run(stop))
        if self.pods is not None:
            self.tasks.start("pod_watch", self.pods.run())
        if self.config_feed.url is not None:  # without config-sync's URL there is nothing to feed
            self.tasks.start("config_feed", self.config_feed.run())
        self.tasks.start("maintenance_loop", self.maintenance_loop())
        self.tasks.start("upgrade_loop", self.upgrade_loop())
        if self.kube_nodes is not None:
            self.tasks.start("kube_nodes", self.kube_nodes.run())
        if self.compute_domains is not None:
            self.tasks.start("compute_domains", self.compute_domains.run())
        try:
            s = self.settings
            async with http.serve(self.http_app(), s.host, s.port, s.http_limits, s.tls) as port:
                log.info(
                    "control_plane_serving",
                    port=port,
                    identity=self.settings.identity,
                    kubernetes=self.kube is not None,
                )
                try:
                    yield port
                finally:
                    self.page.close()  # parked page polls answer now, not at the server's shutdown
        finally:
            self.tasks.stopping()
            # writers first: no write may leave once the Lease is handed back (another replica
            # may be writing by then); the fence closes before they are even told to stop
            self.leader.fence()
            await self.tasks.stop(keep=("leader",))
            stop.set()  # the elector hands the Lease back before it returns
            await self.tasks.stop(grace=3.0, first=("leader",))


def _cache_check(cache: WatchCache[Any]) -> CheckResult:
    return CheckResult(*cache.staleness())


def _stale(cache: WatchCache[Any]) -> float:
    return float(cache.stale)


def _relists(cache: WatchCache[Any]) -> float:
    return float(cache.relists)


async def serve(settings: ControlPlaneSettings, stop: asyncio.Event) -> None:
    pod = f"{settings.namespace}/{settings.pod_name}" if settings.pod_name else None
    logs.bind("control-plane", env=os.environ, pod=pod, identity=settings.identity)
    async with AsyncExitStack() as stack:
        kube: KubeClient | None = None
        registry = CollectorRegistry()
        if settings.kubernetes:
            conf = await load_configuration(settings.kubeconfig, strict=True)
            if conf is not None:
                kube = await stack.enter_async_context(KubeClient(conf, registry=registry))
        else:
            log.warning("kubernetes_disabled", reason="--kubernetes=off")
        plane = ControlPlane(settings, SlurmClient(metrics=SlurmMetrics(registry)), kube, registry)
        await stack.enter_async_context(plane.running())
        await until_stopped(stop, plane.tasks)


def configure(parser: argparse.ArgumentParser) -> None:
    cp_settings.configure(parser)


def main(args: argparse.Namespace) -> int:
    settings = cp_settings.from_args(args)
    return daemon.run(lambda stop: serve(settings, stop))
