"""`status` without a control plane reads a real Slurm: nodes, jobs and drains in progress."""

from __future__ import annotations

import pytest
from status_run import status

from sidecars.devcluster import DevCluster


@pytest.mark.cluster(nodes=2)
async def test_running_job_and_drain_in_progress(cluster: DevCluster) -> None:
    job = await cluster.sbatch("-w", "n1", "-t", "30", wrap="sleep 300")
    await cluster.wait_job(job, "RUNNING")
    client = cluster.client()
    await client.drain(["n1"], "slurm-sidecars: scale-in")
    await cluster.wait_node("n1", lambda n: n.state.drain)

    r = await status(env=cluster.env)

    assert r.code == 0, r.err
    assert r.err == ""
    lines = r.out.splitlines()
    assert lines[0] == "NODES (from slurm)"
    n1 = next(line.split() for line in lines if line.startswith("n1 "))
    n2 = next(line.split() for line in lines if line.startswith("n2 "))
    assert n1[1] in {"ALLOCATED", "MIXED"} and n1[2] == "DRAIN" and n1[3] == str(job)
    assert n2[1:4] == ["IDLE", "-", "-"]
    drains = lines[lines.index("DRAINS IN PROGRESS") + 1]
    assert drains.startswith(f"n1: waiting for job(s) {job}, expected done ")
    assert "(in 29m" in drains or "(in 30m" in drains
    assert drains.endswith("(reason: slurm-sidecars: scale-in)")
    jobs = lines[lines.index("JOBS") + 1 :]
    assert jobs[0].split()[:3] == ["JOBID", "STATE", "PARTITION"]
    assert jobs[1].split()[:2] == [str(job), "RUNNING"] and "n1" in jobs[1].split()
    assert "(ask the control plane: --control-plane URL --token-file FILE)" in r.out


@pytest.mark.cluster(nodes=1)
async def test_idle_cluster_after_job_ends(cluster: DevCluster) -> None:
    job = await cluster.sbatch(wrap="true")
    await cluster.wait_job(job, "COMPLETED")
    r = await status(env=cluster.env)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[lines.index("DRAINS IN PROGRESS") + 1] == "none"
    # an ended job is history, not something a person acts on
    assert lines[lines.index("JOBS") + 1] == "none"


@pytest.mark.cluster(nodes=1)
async def test_controller_down_exits_1_and_says_so(cluster: DevCluster) -> None:
    await cluster.stop_slurmctld()
    r = await status("--timeout-seconds", "2", env=cluster.env)
    assert r.code == 1
    assert r.err.startswith("slurm-sidecars status: slurm: ")
    assert "NODES" not in r.out
