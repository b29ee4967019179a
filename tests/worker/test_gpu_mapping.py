"""dcgm-exporter's GPU -> job files follow Slurm's allocation, even when an epilog never ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.devcluster import DevCluster
from sidecars.worker.service import Agent
from tests.helpers import eventually
from tests.worker.agents import running_agent, settings_for


def files(d: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in d.iterdir()}


@pytest.mark.cluster(nodes=1, gpus=4, cpus=2)
@pytest.mark.per_release("each release's GPU allocation and how it shows a job's GRES indices")
async def test_two_jobs_on_four_gpus_and_a_killed_one(cluster: DevCluster, sockdir, tmp_path: Path) -> None:
    mapping = tmp_path / "gpu-jobs"
    mapping.mkdir()
    (mapping / "3").write_text("999\n")  # left by a job of a previous pod whose epilog never ran
    (mapping / "README").write_text("not ours")
    s = settings_for(cluster, sockdir, job_mapping_dir=mapping)
    async with running_agent(cluster, s) as agent:
        await eventually(lambda: "3" not in files(mapping), what="stale file removed at start")
        a = await cluster.sbatch("-t", "1", "--gres=gpu:2", wrap="sleep 60")
        await cluster.wait_job(a, "RUNNING")
        b = await cluster.sbatch("-t", "1", "--gres=gpu:2", wrap="sleep 60")
        await cluster.wait_job(b, "RUNNING")
        indices = {j.job_id: j.gpu_indices["n1"] for j in await cluster.client().jobs() if j.job_id in (a, b)}
        assert sorted(indices[a] + indices[b]) == [0, 1, 2, 3]
        want = {str(i): f"{job}\n" for job, idx in indices.items() for i in idx}
        await eventually(lambda: files(mapping) == {**want, "README": "not ours"}, what=f"files {want}")

        # SIGKILL and no epilog: nothing but the agent's reconcile clears the job's files
        await cluster.scancel(a, "-s", "KILL")
        await cluster.wait_job(a, {"CANCELLED", "FAILED", "COMPLETED"})
        left = {str(i): f"{b}\n" for i in indices[b]}
        await eventually(lambda: files(mapping) == {**left, "README": "not ours"}, what=f"files {left}")
        assert agent.metrics.gpu_files._value.get() == 2
    assert not [p for p in mapping.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.cluster(nodes=1, gpus=4)
async def test_stale_files_go_even_when_the_node_is_idle(
    cluster: DevCluster, sockdir, tmp_path: Path
) -> None:
    mapping = tmp_path / "gpu-jobs"
    mapping.mkdir()
    for i in range(4):
        (mapping / str(i)).write_text("12345\n")
    (mapping / ".tmp-abc").write_text("half")
    s = settings_for(cluster, sockdir, job_mapping_dir=mapping)
    agent: Agent
    async with running_agent(cluster, s) as agent:
        await eventually(lambda: files(mapping) == {}, what="every stale file removed")
        assert agent.status()["gpu_jobs"] == {}
