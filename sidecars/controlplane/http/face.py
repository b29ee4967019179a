"""Everything the control plane serves beside the daemon's probes and metrics, built in one place:
the /v1/ API (fleet, maintenance, upgrade) behind `access`, and the operator's page at /ui/."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from sidecars.controlplane.changes import ClusterUpgrades, Maintenance, Upgrade
from sidecars.controlplane.fleet import (
    AgentVersions,
    ControlPlaneMetrics,
    DrainBatcher,
    DrainClock,
    FleetView,
    Workers,
)
from sidecars.controlplane.http import planned
from sidecars.controlplane.http.access import Access, Reviewer
from sidecars.controlplane.http.api import ControlPlaneAPI
from sidecars.controlplane.http.config_feed import ConfigFeed
from sidecars.controlplane.http.errors import Leadership
from sidecars.controlplane.http.maintenance_api import MaintenanceAPI
from sidecars.controlplane.http.page import PageState
from sidecars.controlplane.http.upgrade_api import UpgradeAPI, unavailable
from sidecars.controlplane.http.web import WebUI
from sidecars.controlplane.reconcile import Recycler
from sidecars.controlplane.settings import ControlPlaneSettings
from sidecars.slurm import SlurmClient


class Face:
    def __init__(
        self,
        settings: ControlPlaneSettings,
        *,
        slurm: SlurmClient,
        fleet: FleetView,
        drains: DrainBatcher,
        drain_clock: DrainClock,
        leader: Leadership,
        metrics: ControlPlaneMetrics,
        workers: Workers,
        maintenance: Maintenance,
        review: Reviewer | None,
        recycler: Recycler | None,
        upgrade: Upgrade | None,
        cluster_upgrades: ClusterUpgrades,
        cluster: Callable[[], Mapping[str, Any]],
    ) -> None:
        self.versions = AgentVersions()  # the slurmd releases the agents report
        self.access = Access(
            settings.token,
            settings.viewer_token,
            review=review,
            audience=settings.agent_audience,
            locate=workers.agent_node,
            refused=lambda identity, status: metrics.api_refusals.labels(identity, str(status)).inc(),
        )
        self.api = ControlPlaneAPI(
            self.access,
            fleet=fleet,
            drains=drains,
            recycler=recycler,
            leadership=leader,
            metrics=metrics,
            max_wait=settings.max_wait_seconds,
            versions=self.versions,
        )
        self.maintenance_api = MaintenanceAPI(maintenance, leader)
        why_no_upgrade = unavailable(settings.kubernetes)
        self.upgrade_api = UpgradeAPI(
            upgrade,
            slurm,
            leader,
            self.versions,
            lambda: fleet.snapshot.nodes,
            why_no_upgrade,
            cluster=cluster_upgrades,
        )
        # the operator's page (/ui/): its own read-only credential, config-sync's part read from it
        self.config_feed = ConfigFeed(settings.config_sync, token=settings.viewer_token)
        self.page = PageState(
            fleet,
            config=self.config_feed,
            drains=drain_clock,
            cluster=cluster,
            unregistered_pods=lambda: _unregistered(recycler),
            sections={
                "maintenance": lambda: planned.maintenance_rows(maintenance),
                "upgrade": lambda: [
                    *planned.cluster_upgrade_rows(cluster_upgrades),
                    *planned.upgrade_rows(upgrade, why_no_upgrade),
                ],
            },
        )
        self.config_feed.on_change = self.page.touch
        cluster_upgrades.on_change = self.page.touch  # each stage's start and end: the page now
        self.web = WebUI(settings.viewer_token, self.page)

    def install(self, app: web.Application) -> None:
        self.api.install(app)
        self.maintenance_api.install(app)
        self.upgrade_api.install(app)
        self.web.install(app)


def _unregistered(recycler: Recycler | None) -> list[dict[str, Any]]:
    if recycler is None:
        return []
    return [
        {"namespace": ns, "pod": pod, "detail": r.detail} for (ns, pod), r in sorted(recycler.reports.items())
    ]
