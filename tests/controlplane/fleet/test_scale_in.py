"""Scale-in order from real jobs with different time limits, and the deletion costs it writes."""

from __future__ import annotations

import pytest

from sidecars.controlplane.fleet import ranking
from sidecars.controlplane.reconcile.deletion_cost import ANNOTATION
from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import control_plane
from tests.controlplane.reconcile.settle import settled
from tests.fakekube import FakeKube
from tests.helpers import eventually

pytestmark = pytest.mark.cluster(nodes=4)


@pytest.mark.parametrize("brief_jobs", [True, False], ids=["brief-jobs", "json-jobs"])
@pytest.mark.per_release("the jobs read from each release's squeue text and JSON")
async def test_order_and_deletion_costs_from_real_jobs(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str], brief_jobs: bool
) -> None:
    fake, url = fake_kube
    for i in range(1, 5):
        fake.add_pod(f"worker-{i}", hostname=f"n{i}", labels={"app": "slurmd"})
    fake.add_pod("sts-0", hostname="n3", labels={"app": "slurmd"}, owner_kind="StatefulSet")
    jobs = {
        "n1": await cluster.sbatch("-w", "n1", "-t", "10", wrap="sleep 600"),
        "n2": await cluster.sbatch("-w", "n2", wrap="sleep 600"),  # no limit (partition MaxTime=INFINITE)
        "n3": await cluster.sbatch("-w", "n3", "-t", "5", wrap="sleep 600"),
    }
    for job in jobs.values():
        await cluster.wait_job(job, "RUNNING")
    async with control_plane(cluster, kube_url=url, reads={"brief_jobs": brief_jobs}) as cp:
        await eventually(
            lambda: cp.get("/v1/scale-in-order"), lambda r: r[1] == ["n4", "n3", "n1", "n2"], what="order"
        )
        nodes = {n["name"]: n for n in (await cp.get("/v1/nodes"))[1]}
        assert nodes["n4"]["busy_until"] is None
        assert nodes["n2"]["busy_until"] == ranking.FAR_FUTURE
        assert nodes["n1"]["busy_until"] - nodes["n3"]["busy_until"] in range(295, 306)

        def costs() -> dict[str, str | None]:
            return {
                name: pod["metadata"]["annotations"].get(ANNOTATION) for (_, name), pod in fake.pods.items()
            }

        async def read() -> dict[str, str | None]:
            return costs()

        final = await eventually(
            read, lambda c: all(c[f"worker-{i}"] is not None for i in range(1, 5)), what="deletion costs"
        )
        assert final["sts-0"] is None  # only ReplicaSet-owned pods
        assert (
            int(final["worker-4"] or -1)
            < int(final["worker-3"] or -1)
            < int(final["worker-1"] or -1)
            < int(final["worker-2"] or -1)
        )
        assert final["worker-4"] == "0" and final["worker-2"] == str(ranking.MAX_BUCKET)
        patches = cost_patches(fake)
        assert patches == 4
        # later passes do not patch again while the buckets stay the same (the writers' own rounds
        # waited for, not only refreshes, which a loaded machine's slow round can lag)
        version = cp.plane.fleet.snapshot.version
        await settled(cp)
        assert cost_patches(fake) == patches

        # the n3 job ends: n3 becomes idle, its bucket drops to 0 and only it is patched
        await cluster.scancel(jobs["n3"])
        await eventually(read, lambda c: c["worker-3"] == "0", what="worker-3 re-ranked")
        assert cp.plane.fleet.snapshot.version > version
        assert cost_patches(fake) == patches + 1
        order = (await cp.get("/v1/scale-in-order"))[1]
        assert order[:2] == ["n3", "n4"] and order[2:] == ["n1", "n2"]


def test_buckets_change_once_per_doubling() -> None:
    now = 1_000_000
    assert ranking.bucket(None, now) == 0
    assert ranking.bucket(ranking.FAR_FUTURE, now) == ranking.MAX_BUCKET
    minutes = [0, 1, 2, 3, 4, 7, 8, 15, 16, 600, 100_000]
    buckets = [ranking.bucket(now + 60 * m, now) for m in minutes]
    assert buckets == sorted(buckets)
    assert buckets[:9] == [1, 2, 3, 3, 4, 4, 5, 5, 6]
    assert max(buckets) < ranking.MAX_BUCKET


def cost_patches(fake: FakeKube) -> int:
    """Deletion-cost patches only (the busy label's patches of the same pods are counted apart)."""
    return sum(
        1
        for r in fake.answered("PATCH", "/pods/")
        if ANNOTATION in (((r.body or {}).get("metadata") or {}).get("annotations") or {})
    )
