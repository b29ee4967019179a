"""Coordinated mode: the node's state comes from the control plane's long poll and drains go through
it, with no Slurm query of the agent's own in steady state; without it the agent works alone."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from sidecars.devcluster import DevCluster, free_port
from tests.helpers import eventually
from tests.worker.agents import (
    completed,
    drained_under_a_job,
    hook,
    running_agent,
    settings_for,
    slurm_commands,
    token_file,
)
from tests.worker.nodeapi import FakeControlPlane

TOKEN = "s3cret-token-7c0e5b1f9a2d4e86b3c1"


async def polls_pass(cp: FakeControlPlane, node: str, count: int) -> None:
    start = cp.polls[node]
    await eventually(lambda: cp.polls[node] >= start + count, what=f"{count} long polls")


@pytest.mark.cluster(nodes=1, gpus=2)
@pytest.mark.releases("slurm26")  # the long poll is ours, not Slurm's: one release shows it
async def test_steady_state_makes_no_slurm_query_of_its_own(
    cluster: DevCluster, sockdir, tmp_path: Path
) -> None:
    cp = FakeControlPlane(cluster.env, TOKEN)
    mapping = tmp_path / "gpus"
    mapping.mkdir()
    async with cp.running() as url:
        s = settings_for(
            cluster,
            sockdir,
            control_plane=url,
            token_file=token_file(sockdir, TOKEN),
            job_mapping_dir=mapping,
        )
        async with running_agent(cluster, s) as agent:
            await eventually(lambda: agent.registration.status.state == "registered", what="registered")
            await polls_pass(cp, "n1", 5)
            # `slurmd -V` of the running binary (its release, once per slurmd) asks no daemon
            assert {k: n for k, n in slurm_commands(agent).items() if not k.startswith("slurmd")} == {}
            assert agent.source.mode == "control-plane"
            # a job arrives: the GPU files need Slurm's allocation once, then nothing more
            job = await cluster.sbatch("-t", "1", "--gres=gpu:1", wrap="sleep 30")
            await cluster.wait_job(job, "RUNNING")
            await eventually((mapping / "0").exists, what="GPU file")
            assert (mapping / "0").read_text() == f"{job}\n"
            before = slurm_commands(agent)
            await polls_pass(cp, "n1", 5)
            assert slurm_commands(agent) == before
            assert sum(n for k, n in before.items() if not k.startswith("slurmd")) <= 2


@pytest.mark.cluster(nodes=1)
@pytest.mark.releases("slurm22")  # the route is ours; drains are read per release in test_drain.py
async def test_drain_goes_through_the_control_plane(cluster: DevCluster, sockdir) -> None:
    cp = FakeControlPlane(cluster.env, TOKEN)
    async with cp.running() as url:
        s = settings_for(cluster, sockdir, control_plane=url, token_file=token_file(sockdir, TOKEN))
        async with running_agent(cluster, s) as agent:
            job, _ = await drained_under_a_job(cluster, s, wrap="sleep 3")
            await completed(cluster, job)
            assert (
                "n1",
                "drain",
                {"reason": "slurm-sidecars: pod slurm/worker-n1 terminating"},
            ) in cp.requests
            used = slurm_commands(agent)
            assert "scontrol update" not in used, used  # the drain itself went through the control plane
            assert agent.metrics.fallbacks._value.get() == 0


@pytest.mark.cluster(nodes=1)
@pytest.mark.releases("slurm24")  # the fallback is ours; it runs per release in the test below
async def test_unreachable_control_plane_never_blocks_a_drain(cluster: DevCluster, sockdir) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    s = settings_for(cluster, sockdir, control_plane=dead, token_file=token_file(sockdir, TOKEN))
    async with running_agent(cluster, s) as agent:
        job, _ = await drained_under_a_job(cluster, s, wrap="sleep 3")
        await completed(cluster, job)
        assert agent.source.mode == "fallback"
        assert agent.metrics.fallbacks._value.get() >= 1


@pytest.mark.cluster(nodes=1)
async def test_control_plane_lost_mid_drain_falls_back(cluster: DevCluster, sockdir) -> None:
    cp = FakeControlPlane(cluster.env, TOKEN)
    go = cluster.out_dir / "go"
    # runs until the test says so, not for a few seconds a loaded machine can spend before the
    # control plane is gone (the drain would then end through it, and nothing fall back)
    job = await cluster.sbatch("-t", "1", wrap=f"while [ ! -e {go} ]; do sleep 0.2; done")
    await cluster.wait_job(job, "RUNNING")
    async with contextlib.AsyncExitStack() as cp_alive:
        url = await cp_alive.enter_async_context(cp.running())
        s = settings_for(cluster, sockdir, control_plane=url, token_file=token_file(sockdir, TOKEN))
        async with running_agent(cluster, s) as agent:
            waiting = asyncio.ensure_future(hook(s, within=60))
            await cluster.wait_node("n1", lambda n: n.state.drain)
            assert (
                "n1",
                "drain",
                {"reason": "slurm-sidecars: pod slurm/worker-n1 terminating"},
            ) in cp.requests
            await cp_alive.aclose()  # the control plane goes away while the job still runs
            go.touch()
            code, answer = await waiting
            assert (code, answer["result"]) == (0, "drained"), answer
            assert agent.source.mode == "fallback"
    assert (await cluster.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED"})).state == "COMPLETED"


@pytest.mark.cluster(nodes=1)
@pytest.mark.releases("slurm24")  # the report is ours; test_registration.py reads Slurm per release
async def test_unregistered_pod_is_reported_to_the_control_plane(cluster: DevCluster, sockdir) -> None:
    cp = FakeControlPlane(cluster.env, TOKEN)
    async with cp.running() as url:
        s = settings_for(
            cluster,
            sockdir,
            node="nosuch",
            control_plane=url,
            token_file=token_file(sockdir, TOKEN),
            registration_timeout_seconds=0.5,
            heal_attempts=1,
            heal_backoff_seconds=0.2,
            slurmd_restart_command=("false",),
        )
        async with running_agent(cluster, s) as agent:
            await eventually(lambda: any(a == "report" for _, a, _ in cp.requests), what="a report")
            assert agent.registration.status.declared_unregistered
            reports = [b for n, a, b in cp.requests if a == "report"]
            assert reports[-1]["registered"] is False
            assert reports[-1]["pod_name"] == "worker-nosuch" and reports[-1]["pod_namespace"] == "slurm"
            assert "gave up after 1" in reports[-1]["detail"]
