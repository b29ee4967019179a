"""The worker-pod cache (list + watch, relist after 410) and the deletion-cost rate limit, on the fake API."""

from __future__ import annotations

import asyncio
import contextlib
import time

from prometheus_client import CollectorRegistry

from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.controlplane.fleet.pods import PodCache, node_name
from sidecars.controlplane.reconcile.deletion_cost import ANNOTATION, DeletionCostWriter
from sidecars.kube import KubeClient
from sidecars.kube.client import KubeRetry
from sidecars.runtime.waits import within
from tests.controlplane.conftest import one_pass, writer_deps
from tests.fakekube import FakeKube, configuration
from tests.helpers import eventually, fleet_node, fleet_snapshot


async def test_cache_follows_the_watch_and_relists_after_410(fake_kube: tuple[FakeKube, str]) -> None:
    fake, url = fake_kube
    fake.add_pod("w1", hostname="n1")
    fake.add_pod("web", labels={"app": "web"})
    async with KubeClient(configuration(url), retry=KubeRetry(initial_wait=0.01, max_wait=0.02)) as kube:
        cache = PodCache(kube, "slurm", "app=slurmd", watch_seconds=2)
        task = asyncio.create_task(cache.run())
        try:
            await within(cache.synced.wait(), 5)
            assert set(cache.pods) == {"w1"}

            async def names() -> set[str]:
                return set(cache.pods)

            fake.add_pod("w2", hostname="n2")
            await eventually(names, lambda n: n == {"w1", "w2"}, what="w2 seen by the watch")
            await kube.delete_pod("slurm", "w1")
            await eventually(names, lambda n: n == {"w2"}, what="w1 gone")
            # history compacted, and the watch cut before a bookmark moved it on: the next watch,
            # from an old version, gets 410 and the cache lists again
            fake.min_watch_rv = fake.rv + 1
            fake.history.clear()
            fake.add_pod("w3", hostname="n3")
            fake.history.clear()
            fake.drop_watches()
            await eventually(names, lambda n: n == {"w2", "w3"}, within=10, what="relist after 410")
            assert len(fake.answered("GET", "/pods")) >= 3
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_deletion_costs_are_rate_limited_and_only_on_bucket_changes(
    fake_kube: tuple[FakeKube, str],
) -> None:
    fake, url = fake_kube
    for i in range(6):
        fake.add_pod(f"w{i}", hostname=f"n{i}")
    async with KubeClient(configuration(url)) as kube:
        pods, _ = await kube.list_pods("slurm", "app=slurmd")
        now = time.time()
        snap = fleet_snapshot(
            (fleet_node(f"n{i}", busy_until=None if i % 2 else int(now) + 3600) for i in range(6)),
            taken_at=now,
        )
        metrics = ControlPlaneMetrics(CollectorRegistry())
        clock = [now]  # the writer's clock, moved by the test: no real second is waited out
        writer = DeletionCostWriter(
            writer_deps(kube=kube, metrics=metrics, node_of=node_name, slinky_mode=None),
            qps=2.0,
            clock=lambda: clock[0],
        )
        assert await one_pass(writer, pods, snap) == 2  # the bucket holds two tokens
        assert metrics.deletion_cost_patches.labels("deferred")._value.get() == 4
        assert await one_pass(writer, pods, snap) == 0  # no time has passed: no token yet
        # the lowest costs (idle: 0) go first
        patched = {r.path.rsplit("/", 1)[1] for r in fake.answered("PATCH", "/pods/")}
        assert patched <= {"w1", "w3", "w5"}
        made = []
        for _ in range(2):
            clock[0] += 5.0  # two more tokens (the bucket never holds more than qps)
            pods, _ = await kube.list_pods("slurm", "app=slurmd")
            made.append(await one_pass(writer, pods, snap))
        assert made == [2, 2]
        assert {
            p.name: p.annotations.get(ANNOTATION) for p in (await kube.list_pods("slurm", "app=slurmd"))[0]
        } == {"w0": "7", "w1": "0", "w2": "7", "w3": "0", "w4": "7", "w5": "0"}
        clock[0] += 1.0
        assert await one_pass(writer, pods, snap) == 0  # no bucket changed: no patch
