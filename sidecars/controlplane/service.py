"""The control plane assembled: refresh loop, act loop (leader only), drains, leader election, HTTP."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import AsyncExitStack
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from sidecars.controlplane import settings as cp_settings
from sidecars.controlplane.api import ControlPlaneAPI
from sidecars.controlplane.configfeed import ConfigFeed
from sidecars.controlplane.deletion_cost import DeletionCostWriter
from sidecars.controlplane.drains import DrainBatcher
from sidecars.controlplane.kubenodes import NodeCache
from sidecars.controlplane.leader import LeaderElector
from sidecars.controlplane.metrics import ControlPlaneMetrics
from sidecars.controlplane.nodesync import CordonSync
from sidecars.controlplane.page import DrainClock, PageState
from sidecars.controlplane.podconditions import ConditionWriter
from sidecars.controlplane.pods import PodCache, node_name
from sidecars.controlplane.recycle import RecyclePolicy, Recycler
from sidecars.controlplane.settings import ControlPlaneSettings
from sidecars.controlplane.snapshot import FleetView
from sidecars.controlplane.web import WebUI
from sidecars.kube import KubeClient, KubeEventSink, Pod, load_configuration
from sidecars.runtime import daemon, http
from sidecars.runtime.events import EventSink, LogEventSink
from sidecars.runtime.health import CheckResult, Checks
from sidecars.slurm import SlurmClient, SlurmError, SlurmMetrics

log = structlog.get_logger(__name__)


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
            on_change=lambda lead: self.metrics.leader.set(1 if lead else 0),
        )
        self.pods: PodCache | None = None
        self.costs: DeletionCostWriter | None = None
        self.recycler: Recycler | None = None
        self.kube_nodes: NodeCache | None = None
        self.cordons: CordonSync | None = None
        if kube is not None and settings.cordon_sync:
            self.kube_nodes = NodeCache(kube)
            self.cordons = CordonSync(
                kube, self.kube_nodes, self.drains, self.node_of, taint_keys=settings.cordon_taints
            )
        self.conditions: ConditionWriter | None = None
        if kube is not None and settings.pod_conditions:
            self.conditions = ConditionWriter(
                kube,
                self.node_of,
                qps=settings.condition_qps,
                settle=settings.condition_settle_seconds,
            )
        if kube is not None:
            self.pods = PodCache(kube, settings.namespace, settings.worker_selector)
            self.costs = DeletionCostWriter(
                kube, self.metrics, qps=settings.deletion_cost_qps, node_of=self.node_of
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
        self.api = ControlPlaneAPI(
            settings.token,
            fleet=self.fleet,
            drains=self.drains,
            recycler=self.recycler,
            leadership=self.leader,
            metrics=self.metrics,
            max_wait=settings.max_wait_seconds,
        )
        # the operator's page (/ui/): its own read-only credential, config-sync's part read from it
        self.drain_clock = DrainClock()
        self.config_feed = ConfigFeed(settings.config_sync)
        self.page = PageState(
            self.fleet,
            config=self.config_feed,
            drains=self.drain_clock,
            cluster=self._page_cluster,
            unregistered_pods=self._unregistered_pods,
        )
        self.config_feed.on_change = self.page.touch
        self.web = WebUI(settings.viewer_token or settings.token, self.page)

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

    def node_of(self, pod: Pod) -> str:
        """The pod's Slurm node: the node whose Comment names this pod (Slinky writes it), else by
        host name or label."""
        snap = self.fleet.snapshot
        if self._pod_index[0] != snap.version:  # built once per snapshot, not once per pod
            index = {(v.pod.namespace, v.pod.pod_name): v.name for v in snap.nodes.values() if v.pod}
            self._pod_index = (snap.version, index)
        found = self._pod_index[1].get((pod.namespace, pod.name))
        return found or node_name(pod, self.settings.node_label)

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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._refresh_now.wait(), interval)

    async def act_loop(self) -> None:
        """After each refresh, the leader writes deletion costs and recycles; failures wait for the next."""
        while True:
            await self._refreshed.wait()
            self._refreshed.clear()
            if not self.leader.is_leader or self.pods is None or not self.pods.synced.is_set():
                continue
            pods = list(self.pods.pods.values())
            snap = self.fleet.snapshot
            try:
                if self.costs is not None and snap.loaded:
                    await self.costs.sync(pods, snap)
                if self.recycler is not None:
                    await self.recycler.cycle(pods, snap)
                if self.cordons is not None and self.cordons.ready and snap.loaded:
                    await self.cordons.cycle(pods, snap)
                if self.conditions is not None and snap.loaded:
                    await self.conditions.sync(pods, snap)
            except Exception as exc:  # a Kubernetes hiccup must not end the loop
                log.warning("act_failed", error=str(exc))

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

        liveness.add("refresh_loop", ticking)
        readiness.add("fleet_view", loaded)
        app = http.DaemonHTTP(self.registry, liveness, readiness, self.status).app(client_max_size=16 * 1024)
        self.api.install(app)
        self.web.install(app)
        return app

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[int]:
        stop = asyncio.Event()
        tasks: list[asyncio.Task[None]] = []

        def spawn(coro: Coroutine[Any, Any, None]) -> None:
            tasks.append(asyncio.create_task(coro))

        self.fleet.last_attempt = time.monotonic()
        spawn(self.refresh_loop())
        spawn(self.drain_loop())
        spawn(self.act_loop())
        spawn(self.leader.run(stop))
        if self.pods is not None:
            spawn(self.pods.run())
        spawn(self.config_feed.run())
        if self.kube_nodes is not None:
            spawn(self.kube_nodes.run())
        try:
            async with http.serve(self.http_app(), self.settings.host, self.settings.port) as port:
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
            stop.set()  # the elector hands the Lease back before it returns
            leader_task = tasks[3]
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(leader_task), 3.0)
            # cancel until done: on Python 3.11 a wait_for whose inner await completes at the moment
            # of the cancel swallows it (cpython#86296), and a loop would then run on forever
            pending = set(tasks)
            while pending:
                for task in pending:
                    task.cancel()
                _, pending = await asyncio.wait(pending, timeout=0.5)
            for task in tasks:
                if not task.cancelled() and task.exception() is not None:
                    log.warning("task_failed", task=task.get_name(), error=str(task.exception()))


async def serve(settings: ControlPlaneSettings, stop: asyncio.Event) -> None:
    structlog.contextvars.bind_contextvars(role="control-plane", identity=settings.identity)
    async with AsyncExitStack() as stack:
        kube: KubeClient | None = None
        registry = CollectorRegistry()
        if settings.kubernetes:
            conf = await load_configuration(settings.kubeconfig)
            if conf is not None:
                kube = await stack.enter_async_context(KubeClient(conf, registry=registry))
        else:
            log.warning("kubernetes_disabled", reason="--kubernetes=off")
        plane = ControlPlane(settings, SlurmClient(metrics=SlurmMetrics(registry)), kube, registry)
        await stack.enter_async_context(plane.running())
        await stop.wait()


def configure(parser: argparse.ArgumentParser) -> None:
    cp_settings.configure(parser)


def main(args: argparse.Namespace) -> int:
    settings = cp_settings.from_args(args)
    return daemon.run(lambda stop: serve(settings, stop))
