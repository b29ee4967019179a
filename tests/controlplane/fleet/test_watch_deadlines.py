"""Watches with deadlines: a watch the API server accepted and then went silent on (a half-open
connection, a dropped NAT entry) is given up within the silence bound and the cache listed again;
meanwhile readiness and a metric say the cache is stale; every connection has TCP keepalive."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sidecars.controlplane.fleet.kube_nodes import NodeCache
from sidecars.controlplane.fleet.pods import PodCache
from sidecars.controlplane.service import ControlPlaneService
from sidecars.devcluster import DevCluster
from sidecars.kube import KubeClient
from sidecars.kube.cache import WatchCache
from sidecars.kube.client import KubeRetry
from sidecars.runtime.process import run
from tests.controlplane.conftest import control_plane
from tests.fakekube import FakeKube, configuration
from tests.helpers import eventually

SILENCE = 1.5  # seconds: the bound under test (90 in production, against bookmarks once a minute)


@pytest.mark.parametrize("kind", ["pods", "nodes"])
async def test_a_black_holed_watch_is_given_up_and_the_cache_relisted(
    fake_kube: tuple[FakeKube, str], kind: str
) -> None:
    fake, url = fake_kube
    fake.bookmark_seconds = 0.3  # a quiet but healthy watch is never silent that long
    fake.add_pod("w1", hostname="n1")
    fake.add_node("k1")
    retry = KubeRetry(attempts=2, initial_wait=0.01, max_wait=0.02)
    async with KubeClient(configuration(url), retry=retry, watch_silence_seconds=SILENCE) as kube:
        cache: WatchCache[Any] = (
            PodCache(kube, "slurm", "app=slurmd", watch_seconds=60)
            if kind == "pods"
            else NodeCache(kube, watch_seconds=60)
        )
        task = asyncio.create_task(cache.run())
        try:
            await eventually(lambda: fake.calls()[("watch", kind)] >= 1, what="watching")
            # healthy and quiet, well past the bound: bookmarks keep it current, nothing relisted
            await asyncio.sleep(SILENCE * 2)
            assert cache.relists == 0 and not cache.stale
            fake.black_hole("GET", f"/{kind}")
            fake.drop_watches()  # the watch reopens, into the black hole
            await eventually(lambda: fake.calls()[("watch", kind)] >= 2, what="the watch reopened")
            cut = time.monotonic()
            if kind == "pods":
                fake.add_pod("w2", hostname="n2")
            else:
                fake.add_node("k2")
            await eventually(lambda: len(cache.items) == 2, within=SILENCE + 10, what="the change seen")
            assert time.monotonic() - cut < SILENCE + 5
            assert cache.relists == 1 and not cache.stale
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


@pytest.mark.releases("slurm24")  # the watches are ours, not Slurm's
@pytest.mark.cluster(nodes=1)
async def test_readiness_and_a_metric_say_stale_until_the_relist(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.bookmark_seconds = 0.3
    fake.add_pod("w-n1", hostname="n1", labels={"app": "slurmd"})

    def short_bound(plane: ControlPlaneService) -> None:
        assert plane.kube is not None and plane.workers.pods is not None
        plane.kube.watch_silence_seconds = plane.workers.pods.silence_seconds = SILENCE

    async with control_plane(cluster, url, prepare=short_bound) as cp:
        assert cp.sample("slurm_sidecars_kube_cache_stale", cache="pods") == 0
        # the watch goes silent, and the lists that follow fail for a while (the API server away)
        fake.black_hole("GET", "/pods")
        fake.inject("GET", "/pods", 500, times=8)
        fake.drop_watches()
        _, body = await eventually(
            lambda: cp.get("/readyz"), lambda r: r[0] == 503, within=SILENCE + 10, what="not ready"
        )
        assert body["checks"]["pods_cache"]["ok"] is False, body
        assert cp.sample("slurm_sidecars_kube_cache_stale", cache="pods") == 1
        fake.add_pod("w-n2", hostname="n2", labels={"app": "slurmd"})
        await eventually(lambda: cp.get("/readyz"), lambda r: r[0] == 200, within=30, what="ready again")
        assert cp.plane.workers.pods is not None and set(cp.plane.workers.pods.pods) == {"w-n1", "w-n2"}
        assert cp.sample("slurm_sidecars_kube_cache_stale", cache="pods") == 0
        assert cp.sample("slurm_sidecars_kube_cache_relists", cache="pods") >= 1


async def test_connections_to_the_api_server_have_tcp_keepalive(fake_kube: tuple[FakeKube, str]) -> None:
    fake, url = fake_kube
    port = url.rsplit(":", 1)[1]
    async with KubeClient(configuration(url)) as kube:
        cache = PodCache(kube, "slurm", "app=slurmd", watch_seconds=60)
        task = asyncio.create_task(cache.run())
        try:
            await eventually(lambda: fake.calls()[("watch", "pods")] >= 1, what="watching")
            # the client's end of the open watch: the kernel runs a keepalive timer on it
            out = await run(["ss", "-tnoH", "state", "established", f"dst 127.0.0.1:{port}"], timeout=10)
            lines = [line for line in out.stdout.decode().splitlines() if line.strip()]
            assert lines and all("timer:(keepalive" in line for line in lines), lines
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
