"""A fleet view fed with Slurm's own model objects, for the page's tests that need no Slurm daemon
(access control, the document's shape at 1,000 nodes, the long poll): the states are Slurm's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from prometheus_client import CollectorRegistry

from sidecars.controlplane.fleet.drain_clock import DrainClock
from sidecars.controlplane.fleet.snapshot import FleetView
from sidecars.controlplane.http.config_feed import ConfigFeed
from sidecars.controlplane.http.page import PageState
from sidecars.controlplane.http.web import WebUI
from sidecars.runtime import http
from sidecars.slurm import Job, Node, SlurmClient
from sidecars.slurm.models import NodeState, Reason

VIEWER = "viewer-token-for-tests-8c2e4a6f1b3d5079"


def node(name: str, state: str = "IDLE", reason: str | None = None) -> Node:
    base, *flags = state.split("+")
    return Node(
        name=name,
        state=NodeState(base, frozenset(flags)),
        reason=Reason(reason) if reason else None,
        cpus=8,
        alloc_cpus=0,
        real_memory=1000,
        features=(),
        active_features=(),
        gres="gpu:4",
        gres_used="",
        address="127.0.0.1",
        hostname=name,
        partitions=("debug",),
        boot_time=None,
        slurmd_start_time=None,
        version=None,
    )


def job(job_id: int, on: str, start: int, limit: int | None = 30) -> Job:
    return Job(
        job_id=job_id,
        name=f"j{job_id}",
        user="alice",
        state="RUNNING",
        state_reason="None",
        partition="debug",
        nodes=(on,),
        submit_time=start,
        start_time=start,
        end_time=start + 60 * limit if limit else None,
        time_limit_minutes=limit,
        cpus=1,
        node_count=1,
    )


@dataclass
class Served:
    url: str
    fleet: FleetView
    page: PageState
    web: WebUI
    drains: DrainClock

    def publish(self, nodes: list[Node], jobs: list[Job]) -> None:
        snap = self.fleet.assemble(nodes, jobs)
        self.fleet.publish(snap)
        self.drains.observe(snap)


@contextlib.asynccontextmanager
async def served(config: ConfigFeed | None = None, token: str = VIEWER) -> AsyncIterator[Served]:
    fleet = FleetView(SlurmClient())
    drains = DrainClock()
    page = PageState(fleet, config=config or ConfigFeed(None), drains=drains)
    web = WebUI(token, page, max_wait=5)
    app = http.DaemonHTTP(CollectorRegistry()).app()
    web.install(app)
    async with http.serve(app, "127.0.0.1", 0) as port:
        try:
            yield Served(f"http://127.0.0.1:{port}", fleet, page, web, drains)
        finally:
            page.close()


def session() -> aiohttp.ClientSession:
    # the cookie jar must accept cookies from an IP address, as a browser does
    return aiohttp.ClientSession(
        cookie_jar=aiohttp.CookieJar(unsafe=True), timeout=aiohttp.ClientTimeout(total=20)
    )
