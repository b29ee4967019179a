"""The pod and Node caches resume their watches from the server's bookmarks: a quiet set of workers
whose watch reopens after the cluster's other pods have moved on and been compacted is not listed
again (at 1,000 workers, a list of every pod at each reopen); a bookmark is never taken for an
object."""

from __future__ import annotations

import asyncio

from sidecars.controlplane.fleet.kube_nodes import NodeCache
from sidecars.controlplane.fleet.pods import PodCache
from sidecars.kube import KubeClient
from sidecars.kube.client import KubeRetry
from tests.fakekube import FakeKube, configuration
from tests.helpers import eventually


async def test_a_quiet_watch_reopens_after_compaction_without_a_new_list(
    fake_kube: tuple[FakeKube, str],
) -> None:
    fake, url = fake_kube
    fake.add_pod("w1", hostname="n1")
    fake.add_node("k1")
    async with KubeClient(configuration(url), retry=KubeRetry(attempts=2, initial_wait=0.01)) as kube:
        pods = PodCache(kube, "slurm", "app=slurmd", watch_seconds=1)
        nodes = NodeCache(kube, watch_seconds=1)
        tasks = [asyncio.create_task(pods.run(), name="pods"), asyncio.create_task(nodes.run(), name="nodes")]
        try:

            async def opened() -> tuple[int, int]:
                calls = fake.calls()
                return calls[("watch", "pods")], calls[("watch", "nodes")]

            await eventually(opened, lambda n: min(n) >= 1, what="both watching")
            # the rest of the cluster's pods move on, in pods this watch does not select, and the
            # history is compacted: the version the pod list returned is gone
            fake.add_pod("web", labels={"app": "web"})
            fake.add_pod("elsewhere", namespace="default")
            fake.compact()
            await eventually(opened, lambda n: min(n) >= 3, within=20, what="each watch reopened twice")
            calls = fake.calls()
            assert calls[("list", "pods")] == 1 and calls[("list", "nodes")] == 1, calls
            assert set(pods.pods) == {"w1"} and set(nodes.nodes) == {"k1"}  # no bookmark taken as an object

            fake.set_ready("w1", False)  # and the resumed watch still delivers changes
            await eventually(lambda: not pods.pods["w1"].ready, what="w1 seen not ready")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
