"""The control plane assembled: refresh loop, the writers after each refresh (leader only),
maintenance and upgrade loops, drains, leader election, HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from sidecars.controlplane import probes
from sidecars.controlplane.assembly import Caches, KubeSide, cluster_roles, kube_side, writers
from sidecars.controlplane.changes import (
    ClusterUpgradeMetrics,
    ClusterUpgrades,
    ConfigMapStore,
    Maintenance,
    StageEvents,
    signing_key,
)
from sidecars.controlplane.fleet import (
    ControllerWatch,
    ControlPlaneMetrics,
    DrainBatcher,
    DrainClock,
    FleetView,
    HolderLabel,
    Workers,
    Written,
    unowned,
)
from sidecars.controlplane.fleet.reconfigures import ReconfigureWatch
from sidecars.controlplane.http import Face
from sidecars.controlplane.leader import LeaderElector
from sidecars.controlplane.reconcile import CordonSync, HealthSync, RecordKeeper, Round, TopologySync, View
from sidecars.controlplane.settings import ControlPlaneSettings
from sidecars.kube import KubeClient
from sidecars.kube.cache import WatchCache
from sidecars.kube.nodename import NodeNaming
from sidecars.protocol.events import Reason
from sidecars.runtime import http, looplag
from sidecars.runtime.events import LogEventSink
from sidecars.runtime.tasks import RootTasks
from sidecars.runtime.waits import until_set
from sidecars.slurm import Controllers, SlurmClient, SlurmError, SlurmMetrics

log = structlog.get_logger(__name__)

NO_ROLES = (
    "a whole-cluster upgrade cannot run here: it is driven on Kubernetes (the control plane's "
    "--upgrade-* flags name slurmdbd's and slurmctld's workloads) and in the demo's own stack "
    "(`slurm-sidecars demo --upgrade-to`); a standalone control plane outside Kubernetes has no "
    "backend to stop, copy and start Slurm's daemons: move them by hand in Slurm's order "
    "(docs/upgrades.md, Where it runs)"
)
STATUS = frozenset({"/status"})


class ControlPlaneService:
    """`async with ControlPlaneService(settings, slurm, kube, registry).running() as port:` serves
    until the block ends. `kube` is None with --kubernetes=off: no pods, no writers, no upgrades."""

    def __init__(
        self,
        settings: ControlPlaneSettings,
        slurm: SlurmClient,
        kube: KubeClient | None,
        registry: CollectorRegistry,
    ) -> None:
        self.settings = settings
        self.registry = registry
        if slurm.metrics is None:
            slurm.metrics = SlurmMetrics(registry)
        if slurm.controllers is None:  # several SlurmctldHost: reads and drains go to the primary
            slurm.controllers = Controllers(slurm.env)
        self.slurm = slurm
        self.kube = kube
        self.metrics = ControlPlaneMetrics(registry)
        self.tasks = RootTasks()
        self.lag = looplag.LoopLag(registry, settings.loop_lag)
        self._refresh_now = asyncio.Event()
        self._refreshed = asyncio.Event()
        self.fleet = FleetView(slurm, brief_jobs=settings.reads.brief_jobs)
        self.drain_clock = DrainClock()  # the drains in progress: the page's, and the fast refresh's
        self.leader = LeaderElector(
            kube,
            settings.namespace,
            settings.lease.name,
            settings.identity,
            lease_seconds=settings.lease.duration_seconds,
            renew_seconds=settings.lease.renew_seconds,
            on_change=self._leadership,
        )
        self.drains = DrainBatcher(
            slurm,
            self.metrics,
            window=settings.batch_window_seconds,
            on_written=self._written,
            may_write=lambda: self.leader.is_leader,
        )
        if kube is not None:  # every write, at each attempt, asks the Lease (fencing)
            kube.fence = lambda: self.leader.is_leader
            slurm.fence = lambda: self.leader.is_leader
        caches = Caches.build(settings, kube) if kube is not None else None
        naming = NodeNaming(settings.node_name_from, settings.node_label, settings.node_name_annotation)
        self.workers = Workers(
            self.fleet,
            naming,
            settings.namespace,
            caches.pods if caches else None,
            caches.nodes if caches else None,
        )
        self.maintenance = Maintenance(
            slurm, self.drains, lambda: self.fleet.snapshot.nodes, emit=self._pod_event if kube else None
        )
        self.k8s: KubeSide | None = None
        self.writers = Round((), self.metrics)
        if kube is not None and caches is not None:
            self.k8s = kube_side(
                settings,
                kube,
                caches,
                metrics=self.metrics,
                fleet=self.fleet,
                drains=self.drains,
                workers=self.workers,
                maintenance=self.maintenance,
            )
            found = writers(
                settings,
                self.k8s,
                slurm=slurm,
                metrics=self.metrics,
                drains=self.drains,
                workers=self.workers,
                emit=self.k8s.event_on,
            )
            self.writers = Round(found, self.metrics)
        # a reconfigure seen at once: the fleet read now, and the writers re-assert after it
        self.reconfigures = ReconfigureWatch(
            slurm, seconds=settings.reads.reconfigure_poll_seconds, on_seen=self._refresh_now.set
        )
        self.slurmctld = ControllerWatch(
            slurm,
            self.metrics,
            may_write=lambda: self.leader.is_leader,
            # a takeover seen while following is told by this replica if it holds the Lease soon
            hold_seconds=2 * settings.lease.duration_seconds + settings.reads.interval_seconds,
            emit=self.k8s.events.emit if self.k8s is not None else LogEventSink().emit,
        )
        self.holder_label = (
            HolderLabel(kube, settings.namespace, settings.pod_name, lambda: self.leader.is_leader)
            if kube is not None and settings.leader_label
            else None
        )
        # its roles: the workloads the settings name in Kubernetes; else the dev cluster's release
        # swap, handed in by the demo and the tests (with a store of their own where there is no
        # Kubernetes API)
        roles, why = cluster_roles(settings, self.k8s, slurm) if self.k8s is not None else (None, NO_ROLES)
        self.cluster_upgrades = ClusterUpgrades(
            roles,
            why,
            ClusterUpgradeMetrics(registry),
            events=StageEvents(self.k8s.events, lambda: self.leader.is_leader) if self.k8s else None,
            # signed with the operator token's key: the ConfigMap's writers cannot choose a rollback
            store=ConfigMapStore(kube, settings.namespace, signing_key(settings.token))
            if kube is not None
            else None,
        )
        self.face = Face(
            settings,
            slurm=slurm,
            fleet=self.fleet,
            drains=self.drains,
            drain_clock=self.drain_clock,
            leader=self.leader,
            metrics=self.metrics,
            workers=self.workers,
            maintenance=self.maintenance,
            review=kube.review_token if kube is not None else None,
            recycler=self.k8s.recycler if self.k8s else None,
            upgrade=self.k8s.upgrade if self.k8s else None,
            cluster_upgrades=self.cluster_upgrades,
            cluster=self._page_cluster,
        )

    @property
    def draining(self) -> set[str]:
        """Nodes we drained that still run work (the page shows others' too): refresh fast."""
        return set(self.drain_clock.ours)

    def _leadership(self, lead: bool) -> None:
        self.metrics.leader.set(1 if lead else 0)
        if lead:  # another replica may have written its upgrade's status while this one followed
            self.cluster_upgrades.forget()
        else:  # and a replica that lost the Lease acts no more
            self.cluster_upgrades.lost_lease()
        if lead and self.k8s is not None:  # called from the Lease's task: made by then
            self.k8s.upgrade.forget()  # another replica may have written the plan while this one followed

    def caches(self) -> dict[str, WatchCache[Any]]:
        """The Kubernetes caches this replica keeps, by name (readiness and metrics say when stale)."""
        return self.k8s.caches.named() if self.k8s is not None else {}

    def _page_cluster(self) -> dict[str, Any]:
        status = self.status()
        return {k: status[k] for k in status if k not in {"drains_pending", "draining"}}

    async def _pod_event(self, node: str, reason: Reason, message: str) -> None:
        """An Event on the worker pod of a Slurm node (none when no pod runs it)."""
        pod = self.workers.on_node(node)
        if pod is not None and self.k8s is not None:
            await self.k8s.event_on(pod, reason, message)

    def _written(self, done: Written) -> None:
        self.drain_clock.written(done.names)
        for writer in self.writers.writers:
            if isinstance(writer, CordonSync):  # re-drains among them get their Event
                writer.written(done)
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
            except SlurmError:
                self.metrics.refreshes.labels("error").inc()
            self._refreshed.set()
            # after a reconfigure, fast until the regular read would have come (fleet/reconfigures.py)
            fast = (
                self.drain_clock.ours
                or self.drains.pending
                or self.reconfigures.recent(self.settings.reads.interval_seconds)
            )
            interval = (
                self.settings.reads.fast_interval_seconds if fast else self.settings.reads.interval_seconds
            )
            self._refresh_now.clear()
            await until_set(self._refresh_now, interval)

    async def act_loop(self) -> None:
        """After each refresh, the leader runs the writers (reconcile.Round: each one guarded)."""
        while True:
            await self._refreshed.wait()
            self._refreshed.clear()
            if self.leader.is_leader and self.workers.ready:
                await self.writers.run(View(self.workers.held(), self.fleet.snapshot))

    async def maintenance_loop(self) -> None:
        """Every interval: windows read from Slurm (every replica reports them), acted on by the leader."""
        shown: list[Any] = []  # the windows the page last showed: a new or gone one wakes its readers
        while True:
            try:
                if self.leader.is_leader and self.fleet.snapshot.loaded:
                    if self.k8s is not None and self.workers.ready:
                        await self.k8s.node_windows.sync()
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
                self.face.page.touch()
            await asyncio.sleep(self.settings.reads.interval_seconds)

    async def upgrade_loop(self) -> None:
        """Every interval, the leader moves a started upgrade on by one step (the plan read once per
        term as leader, not every interval: it is the leader's own to write; see _leadership)."""
        while True:
            if self.leader.is_leader:  # a whole-cluster upgrade a former holder left: reported
                await self.cluster_upgrades.ensure_loaded()
            await asyncio.sleep(self.settings.reads.interval_seconds)
            ready = self.workers.ready and self.fleet.snapshot.loaded
            if self.k8s is None or not self.leader.is_leader or not ready:
                continue
            try:
                await self.k8s.upgrade.step()
            except Exception as exc:  # a Kubernetes hiccup must not end the loop
                log.warning("upgrade_step_failed", error=str(exc))

    async def slurmctld_loop(self) -> None:
        await self.slurmctld.run(self.settings.reads.interval_seconds)

    async def holder_label_loop(self) -> None:
        """Every interval, the holder's pod labelled as such (the one Service the agents use)."""
        assert self.holder_label is not None
        while True:
            try:
                await self.holder_label.sync()
            except Exception as exc:  # a Kubernetes hiccup must not end the loop
                log.warning("holder_label_failed", error=str(exc))
            await asyncio.sleep(self.settings.reads.interval_seconds)

    async def drain_loop(self) -> None:
        await self.drains.run()

    # ------------------------------------------------------------------ face
    def status(self) -> dict[str, Any]:
        snap = self.fleet.snapshot
        rec = self.k8s.recycler if self.k8s else None
        topology = next((w for w in self.writers.writers if isinstance(w, TopologySync)), None)
        signals = next((w for w in self.writers.writers if isinstance(w, HealthSync)), None)
        records = next((w for w in self.writers.writers if isinstance(w, RecordKeeper)), None)
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
            "controllers": self.slurmctld.status(),
            "reconfigures": self.reconfigures.status(),
            "drains_pending": sorted(self.drains.pending),
            "draining": sorted(self.drain_clock.ours),
            "maintenance": {
                "windows": [
                    {"name": w.name, "nodes": len(w.nodes), "active": w.active(time.time())}
                    for w in self.maintenance.windows
                ],
                "nodes": self.maintenance.counts(),
                "error": self.maintenance.read_error,
            },
            "refused_pods": [r.as_json() for r in self.workers.claims.refused.values()],
            "unowned_drains": unowned.status(unowned.find(snap.nodes.values())),
            "topology": None if topology is None else topology.status(),
            # decided by the leader only: a follower's would be what it saw when it last led
            "health": signals.status() if signals is not None and self.leader.is_leader else None,
            "records": records.status() if records is not None and self.leader.is_leader else None,
            "recycling": None
            if rec is None
            else {"suspended": rec.suspended, "recent": list(rec.recent), "in_window": len(rec.deleted_at)},
        }

    def http_app(self) -> Any:
        liveness, readiness = probes.checks(
            self.fleet, self.tasks, self.caches(), interval_seconds=self.settings.reads.interval_seconds
        )
        liveness.add(looplag.CHECK, self.lag.check)
        app = http.DaemonHTTP(self.registry, liveness, readiness, self.status).app(client_max_size=16 * 1024)
        # /status names nodes, pods and the Lease holder: the viewer's or the operator's to read
        readers = (self.settings.token, *filter(None, [self.settings.viewer_token]))
        app.middlewares.append(http.bearer_required(STATUS, *readers, who="the viewer's or the operator's"))
        self.face.install(app)
        return app

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[int]:
        """Serve for the duration of the block; `until_stopped(stop, plane.tasks)` inside it raises
        when one of the root tasks ends on its own."""
        stop = asyncio.Event()
        probes.watch_metrics(self.metrics, self.caches())
        self.fleet.last_attempt = time.monotonic()
        self.tasks.start(looplag.TASK, self.lag.run())
        self.tasks.start("refresh_loop", self.refresh_loop())
        self.tasks.start("drain_loop", self.drain_loop())
        self.tasks.start("slurmctld_loop", self.slurmctld_loop())
        if self.settings.reads.reconfigure_poll_seconds > 0:
            self.tasks.start("reconfigure_watch", self.reconfigures.run())
        if self.holder_label is not None:
            self.tasks.start("holder_label_loop", self.holder_label_loop())
        self.tasks.start("act_loop", self.act_loop())
        self.tasks.start("leader", self.leader.run(stop))
        if self.k8s is not None:
            caches = self.k8s.caches
            self.tasks.start("pod_watch", caches.pods.run())
            self.tasks.start("kube_nodes", caches.nodes.run())
            if caches.compute_domains is not None:
                self.tasks.start("compute_domains", caches.compute_domains.run())
        if self.face.config_feed.url is not None:  # without config-sync's URL there is nothing to feed
            self.tasks.start("config_feed", self.face.config_feed.run())
        self.tasks.start("maintenance_loop", self.maintenance_loop())
        self.tasks.start("upgrade_loop", self.upgrade_loop())
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
                    self.face.page.close()  # parked page polls answer now, not at the server's shutdown
        finally:
            await self.cluster_upgrades.close()
            self.tasks.stopping()
            # writers first: no write may leave once the Lease is handed back (another replica
            # may be writing by then); the fence closes before they are even told to stop
            self.leader.fence()
            await self.tasks.stop(keep=("leader",))
            stop.set()  # the elector hands the Lease back before it returns
            await self.tasks.stop(grace=3.0, first=("leader",))
            if self.slurm.controllers is not None:
                self.slurm.controllers.close()
