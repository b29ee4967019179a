"""The brief job read the control plane polls with: captured output of both releases, and live."""

from __future__ import annotations

import pytest

from sidecars.devcluster import DevCluster
from sidecars.slurm import squeueformat
from tests.conftest import DATA


@pytest.mark.parametrize("release", ["22.05", "24.11"])
def test_captured_summaries(release: str) -> None:
    jobs = {
        j.job_id: j
        for j in squeueformat.job_summaries((DATA / f"slurm-{release}" / "squeue--summary.txt").read_text())
    }
    assert jobs[1].running and jobs[1].nodes == ("n1",) and jobs[1].time_limit_minutes == 5
    assert jobs[1].start_time is not None and jobs[1].end_time == jobs[1].start_time + 300
    assert jobs[1].gpus_per_node == 2
    assert jobs[2].time_limit_minutes is None and jobs[2].end_time is None
    assert jobs[3].state == "PENDING" and jobs[3].node_count == 2 and jobs[3].gpus_per_node == 1
    assert jobs[3].start_time is None and jobs[3].time_limit_minutes == 1440
    assert squeueformat.job_summaries("garbage\n\n12|RUNNING\n") == []


@pytest.mark.cluster(nodes=2, gpus=2)
@pytest.mark.per_release("each release's brief and full job reads")
async def test_summaries_agree_with_the_full_read(cluster: DevCluster) -> None:
    running = await cluster.sbatch("-w", "n1", "-t", "7", "--gres=gpu:1", wrap="sleep 300")
    await cluster.wait_job(running, "RUNNING")
    pending = await cluster.sbatch("-N", "2", "--gres=gpu:2", "-t", "3", wrap="sleep 300")
    await cluster.wait_job(pending, "PENDING")
    client = cluster.client()
    full = {j.job_id: j for j in await client.jobs()}
    brief = {j.job_id: j for j in await client.job_summaries()}
    assert set(brief) == {running, pending}
    for job_id, b in brief.items():
        f = full[job_id]
        assert (
            b.state,
            b.partition,
            b.nodes,
            b.start_time,
            b.time_limit_minutes,
            b.cpus,
            b.node_count,
            b.gpus_per_node,
        ) == (
            f.state,
            f.partition,
            f.nodes,
            f.start_time,
            f.time_limit_minutes,
            f.cpus,
            f.node_count,
            f.gpus_per_node,
        )
    assert brief[running].end_time == full[running].end_time
