"""`status` without a control plane reads a real Slurm: nodes, jobs and drains in progress."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sidecars.devcluster import DevCluster
from sidecars.operator.status import StatusSettings, collect, render
from tests.helpers import nodes_from_slurm
from tests.settings import build
from tests.status.invocation import status
from tests.status.servers import control_plane_app, serving

TOKEN = "tok-8d2f6a1c0e9b7d354a1f0c6e2b9d"


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
    assert lines[0] == "2 nodes (1 allocated, 1 idle); 1 draining, 0 drained; jobs: 1 running, 0 pending" or (
        lines[0] == "2 nodes (1 idle, 1 mixed); 1 draining, 0 drained; jobs: 1 running, 0 pending"
    )
    assert lines[2] == "NODES (from slurm)"
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


# two of our paths compared; each reads Slurm on every release in the tests above
@pytest.mark.releases("slurm24")
@pytest.mark.cluster(nodes=3)
async def test_same_fleet_whether_read_directly_or_through_the_control_plane(
    cluster: DevCluster, tmp_path: Path
) -> None:
    """The control-plane contract carries everything the node table shows: both views agree."""
    job = await cluster.sbatch("-w", "n2", "-t", "20", wrap="sleep 300")
    await cluster.wait_job(job, "RUNNING")
    client = cluster.client()
    await client.drain(["n2"], "slurm-sidecars: scale-in")
    await client.drain(["n3"], "maintenance")
    await cluster.wait_nodes(lambda ns: all(n.state.drain for n in ns if n.name in {"n2", "n3"}))
    token = tmp_path / "token"
    token.write_text(TOKEN)
    app = control_plane_app(TOKEN, await nodes_from_slurm(client), ["n3", "n1", "n2"])

    direct = await status(env=cluster.env)
    async with serving(app) as url:
        via_api = await status("--control-plane", url, "--token-file", str(token))

    assert direct.code == via_api.code == 0, direct.err + via_api.err

    def section(out: str, title: str) -> list[str]:
        lines = out.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith(title))
        # the two runs are a moment apart: compare wall times, not the countdown
        return [re.sub(r" \(in [^)]*\)", "", line) for line in lines[start + 1 : lines.index("", start)]]

    assert section(direct.out, "NODES") == section(via_api.out, "NODES")
    assert section(direct.out, "DRAINS IN PROGRESS") == section(via_api.out, "DRAINS IN PROGRESS")
    drains = section(direct.out, "DRAINS IN PROGRESS")
    assert len(drains) == 1 and drains[0].startswith(f"n2: waiting for job(s) {job}")
    assert "1.n3 2.n1 3.n2" in via_api.out


@pytest.mark.cluster(nodes=1)
async def test_collect_in_process_with_a_given_client(cluster: DevCluster) -> None:
    """The demo draws the same table in its own process, with its cluster's client."""
    settings = build(StatusSettings, timeout_seconds=5)
    snap = await collect(settings, cluster.client())
    assert snap.errors == ()
    assert [(n.name, n.state) for n in snap.nodes or []] == [("n1", "IDLE")]
    assert render(snap).startswith("1 node (1 idle); jobs: 0 running, 0 pending\n")
