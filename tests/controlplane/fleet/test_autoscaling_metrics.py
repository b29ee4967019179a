"""Autoscaling figures from real pending work: jobs, CPUs, GPUs and desired workers per partition."""

from __future__ import annotations

import pytest

from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import control_plane
from tests.helpers import eventually

pytestmark = pytest.mark.cluster(nodes=2, gpus=4)


@pytest.mark.per_release("each release writes a pending job's TRES and GRES its own way")
async def test_pending_work_and_desired_workers_per_partition(cluster: DevCluster) -> None:
    busy = [await cluster.sbatch("-w", n, "--gres=gpu:1", wrap="sleep 300") for n in ("n1", "n2")]
    for job in busy:
        await cluster.wait_job(job, "RUNNING")
    pending = [await cluster.sbatch("--gres=gpu:2", wrap="sleep 300") for _ in range(3)]
    held = await cluster.sbatch("--hold", wrap="sleep 300")  # held: no worker would cure it
    for job in [*pending, held]:
        await cluster.wait_job(job, "PENDING")
    async with control_plane(cluster) as cp:

        def sample(name: str) -> float:
            return cp.sample(f"slurm_sidecars_{name}", partition="debug")

        async def read() -> tuple[float, ...]:
            return tuple(
                sample(n)
                for n in ("pending_jobs", "pending_cpus", "pending_gpus", "desired_workers", "idle_nodes")
            )

        await eventually(read, lambda v: v == (3, 3, 6, 5, 0), what="autoscaling gauges")
        assert cp.sample("slurm_sidecars_nodes", state="allocated") == 2
        async with cp.session.get(cp.url + "/metrics") as r:
            text = await r.text()
        assert 'slurm_sidecars_desired_workers{partition="debug"} 5.0' in text
        for job in [*busy, *pending, held]:
            await cluster.scancel(job)
        await eventually(read, lambda v: v == (0, 0, 0, 0, 2), what="gauges after the work is gone")
