"""GPU -> job attribution as a bounded metric: on real Slurm the agent shows each job on the GPUs it
holds and drops the series when the job ends; through 2,000 jobs the live series stay within GPUs x
(jobs_per_gpu + 1) and each job adds one series per GPU it held; the documented Grafana panel uses the
metrics the agent serves, and ships in the dashboard."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sidecars.devcluster import DevCluster
from sidecars.worker.gpu.attribution import JOBS_PER_GPU, GpuAttribution
from tests.helpers import eventually
from tests.worker.agents import running_agent, settings_for

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "gpu-attribution.md"
DASHBOARD = ROOT / "manifests" / "grafana" / "slurm-sidecars.json"


def held(registry: CollectorRegistry) -> set[tuple[str, str, str]]:
    """(node, gpu, job_id) of every slurm_sidecars_gpu_job series now."""
    return {
        (s.labels["node"], s.labels["gpu"], s.labels["job_id"])
        for m in registry.collect()
        for s in m.samples
        if s.name == "slurm_sidecars_gpu_job"
    }


def series(registry: CollectorRegistry) -> int:
    return sum(len(m.samples) for m in registry.collect())


# the GPU indices are read as for the mapping files (test_gpu_mapping.py runs every release); this
# shows the metric built from them
@pytest.mark.releases("slurm26")
@pytest.mark.cluster(nodes=1, gpus=4, cpus=2)
async def test_each_job_shows_on_the_gpus_it_holds_and_goes_when_it_ends(
    cluster: DevCluster, sockdir: Path, tmp_path: Path
) -> None:
    mapping = tmp_path / "gpu-jobs"
    mapping.mkdir()
    s = settings_for(cluster, sockdir, job_mapping_dir=mapping)
    async with running_agent(cluster, s) as agent:
        a = await cluster.sbatch("-t", "1", "--gres=gpu:2", wrap="sleep 60")
        await cluster.wait_job(a, "RUNNING")
        b = await cluster.sbatch("-t", "1", "--gres=gpu:2", wrap="sleep 60")
        await cluster.wait_job(b, "RUNNING")
        jobs = {j.job_id: j.gpu_indices["n1"] for j in await cluster.client().jobs() if j.job_id in (a, b)}
        want = {("n1", str(i), str(job)) for job, idx in jobs.items() for i in idx}
        await eventually(lambda: held(agent.registry), lambda h: h == want, what=f"series {want}")
        counts = {
            s.labels["gpu"]: s.value
            for m in agent.registry.collect()
            for s in m.samples
            if s.name == "slurm_sidecars_gpu_jobs"
        }
        assert counts == {"0": 1, "1": 1, "2": 1, "3": 1}

        await cluster.scancel(a, "-s", "KILL")
        left = {("n1", str(i), str(b)) for i in jobs[b]}
        await eventually(lambda: held(agent.registry), lambda h: h == left, what=f"series {left}")


def test_two_thousand_jobs_keep_the_live_series_bounded_and_add_one_series_per_gpu_held() -> None:
    gpus, jobs_total = 8, 2000
    registry = CollectorRegistry()
    attribution = GpuAttribution("n1").register(registry)
    rng = random.Random(24)
    running: dict[int, list[int]] = {}  # job -> the GPUs it holds (shared GPUs: up to 10 jobs each)
    ever: set[tuple[str, str, str]] = set()
    most = held_total = 0
    for job in range(1, jobs_total + 1):
        running[job] = rng.sample(range(gpus), rng.choice((1, 2, 8)))
        held_total += len(running[job])
        while len(running) > 10 or (running and rng.random() < 0.3):
            del running[min(running)]  # the oldest ends
        mapping: dict[int, list[int]] = {}
        for j, held_gpus in running.items():
            for g in held_gpus:
                mapping.setdefault(g, []).append(j)
        attribution.update(mapping)
        now = held(registry)
        ever |= now
        most = max(most, series(registry))
        assert len(now) <= gpus * JOBS_PER_GPU
        assert all(len([h for h in now if h[1] == str(g)]) <= JOBS_PER_GPU for g in range(gpus))
    assert most <= gpus * (JOBS_PER_GPU + 1)  # job_id series plus one count a GPU, at any job count
    # over the whole run: at most one series per (job, GPU) it held, never one per DCGM field and job
    assert len(ever) <= held_total
    assert {int(j) for _, _, j in ever} <= set(range(1, jobs_total + 1))
    attribution.update({})
    assert held(registry) == set() and series(registry) == 0


def test_the_documented_panel_queries_the_served_metrics() -> None:
    text = DOC.read_text()
    (block,) = re.findall(r"```json\n(.*?)```", text, re.S)
    panel = json.loads(block)
    exprs = [t["expr"] for t in panel["targets"]]
    registry = CollectorRegistry()
    GpuAttribution("n1").register(registry).update({0: [7]})
    served = {s.name for m in registry.collect() for s in m.samples}
    used = {name for e in exprs for name in re.findall(r"slurm_sidecars_\w+", e)}
    assert used and used <= served
    assert all("job_id" in e for e in exprs)
    shipped = json.loads(DASHBOARD.read_text())  # the same panel ships in the dashboard
    assert any(p.get("targets") == panel["targets"] for p in shipped["panels"])
