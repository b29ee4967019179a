"""The preStop drain: waits for running jobs, never kills them, keeps other people's drains."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from sidecars.devcluster import DevCluster
from sidecars.worker.service import Agent
from tests.helpers import RecordingEvents, eventually
from tests.worker.agents import (
    completed,
    drained_under_a_job,
    hook,
    running_agent,
    settings_for,
    stale_look_once,
)

REASON = "slurm-sidecars: pod slurm/worker-n1 terminating"


@pytest.mark.cluster(nodes=1)
@pytest.mark.per_release("DRAINING then DRAINED as each release reports them")
async def test_drain_waits_for_the_running_job_then_returns(cluster: DevCluster, sockdir) -> None:
    s = settings_for(cluster, sockdir)
    async with running_agent(cluster, s) as agent:
        job, returned = await drained_under_a_job(cluster, s, wrap="sleep 3; echo finished")
        done = await completed(cluster, job)
        assert (cluster.out_dir / f"slurm-{job}.out").read_text().strip() == "finished"
        assert done.end_time is not None and returned >= done.end_time
        node = await cluster.client().node("n1")
        assert node is not None and node.state.drained
        assert node.reason is not None and node.reason.text == REASON
        assert agent.metrics.drains.labels(result="drained")._value.get() == 1


@pytest.mark.cluster(nodes=1)
@pytest.mark.per_release("an idle node's DRAINED as each release reports it")
async def test_idle_node_drains_at_once(cluster: DevCluster, sockdir) -> None:
    s = settings_for(cluster, sockdir)
    async with running_agent(cluster, s):
        code, answer = await hook(s, within=30, reason="scale-in")
        assert (code, answer["result"]) == (0, "drained"), answer
        node = await cluster.client().node("n1")
        assert node is not None and node.state.drained
        assert node.reason is not None and node.reason.text == f"{REASON}: scale-in"


@pytest.mark.cluster(nodes=1)
async def test_admin_drained_node_is_left_alone(cluster: DevCluster, sockdir) -> None:
    client = cluster.client()
    await client.drain(["n1"], "disk replacement")
    s = settings_for(cluster, sockdir)
    async with running_agent(cluster, s) as agent:
        await eventually(lambda: agent._startup_done, what="startup check")
        code, answer = await hook(s, within=30)
        assert (code, answer["result"]) == (0, "drained"), answer
    node = await client.node("n1")
    assert node is not None and node.state.drained
    assert node.reason is not None and node.reason.text == "disk replacement"


@pytest.mark.cluster(nodes=1)
async def test_our_own_stale_drain_is_undone_when_the_agent_starts(cluster: DevCluster, sockdir) -> None:
    client = cluster.client()
    await client.drain(["n1"], "slurm-sidecars: pod slurm/worker-n1 terminating")
    events = RecordingEvents()
    s = settings_for(cluster, sockdir)
    async with running_agent(cluster, s, events) as agent:
        await eventually(lambda: agent._startup_done, what="startup check")
        await cluster.wait_node("n1", lambda n: not n.state.drain)
        assert events.reasons() == ["Undrained"]


@pytest.mark.cluster(nodes=1)
async def test_controller_stopped_during_drain(cluster: DevCluster, sockdir) -> None:
    s = settings_for(cluster, sockdir)
    go = cluster.out_dir / "go"
    async with running_agent(cluster, s) as agent:
        # runs until the test says so: the hook must still be waiting for it when slurmctld is gone
        job = await cluster.sbatch("-t", "1", wrap=f"while [ ! -e {go} ]; do sleep 0.2; done")
        await cluster.wait_job(job, "RUNNING")
        waiting = asyncio.ensure_future(hook(s, within=100))
        await cluster.wait_node("n1", lambda n: n.state.drain)
        await cluster.stop_slurmctld()
        await eventually(
            lambda: agent.obs is not None and agent.obs.controller_down,
            within=40,
            what="agent to see the controller down",
        )
        assert not waiting.done(), "a failed lookup must never count as drained"
        await cluster.start_slurmctld()
        go.touch()
        code, answer = await waiting
        assert (code, answer["result"]) == (0, "drained"), answer
        assert (await cluster.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED"})).state == "COMPLETED"


@pytest.mark.cluster(nodes=1)
@pytest.mark.per_release("requeue and DOWN with a job on the node: each release's own handling")
async def test_time_out_with_requeue_sets_the_node_down(cluster: DevCluster, sockdir) -> None:
    s = settings_for(cluster, sockdir, drain_timeout_policy="requeue")
    async with running_agent(cluster, s) as agent:
        job = await cluster.sbatch("-t", "2", "--requeue", wrap="sleep 100")
        await cluster.wait_job(job, "RUNNING")
        code, answer = await hook(s, within=2)
        assert (code, answer["result"]) == (1, "timed_out"), answer
        # Slurm requeued the batch job instead of letting it die with the pod
        await cluster.wait_job(job, "PENDING")
        # DOWN may not last (ReturnToService=2 brings a node back when its slurmd answers); the
        # reason of the DOWN we set, and the drain, stay
        node = await cluster.client().node("n1")
        assert node is not None and node.state.drain
        assert node.reason is not None and node.reason.text == f"{REASON}: drain timed out, jobs requeued"
        assert agent.metrics.drains.labels(result="timed_out")._value.get() == 1


@pytest.mark.cluster(nodes=1)
async def test_time_out_with_leave_leaves_the_job_running(cluster: DevCluster, sockdir) -> None:
    s = settings_for(cluster, sockdir, drain_timeout_policy="leave")
    async with running_agent(cluster, s):
        job = await cluster.sbatch("-t", "2", wrap="sleep 100")
        await cluster.wait_job(job, "RUNNING")
        code, answer = await hook(s, within=2)
        assert (code, answer["result"]) == (1, "timed_out"), answer
        node = await cluster.client().node("n1")
        assert node is not None and node.state.drain and node.state.busy and node.state.base != "DOWN"
        assert (await cluster.wait_job(job, "RUNNING")).state == "RUNNING"


@pytest.mark.cluster(nodes=1)
async def test_agent_restarted_during_a_drain_keeps_it(cluster: DevCluster, sockdir) -> None:
    s = settings_for(cluster, sockdir)
    go = cluster.out_dir / "go"
    # runs until the test says so: two agents' starts and a stop fit in, whatever the machine's load
    job = await cluster.sbatch("-t", "1", wrap=f"while [ ! -e {go} ]; do sleep 0.2; done")
    await cluster.wait_job(job, "RUNNING")
    async with running_agent(cluster, s):
        waiting = asyncio.ensure_future(hook(s, within=60))
        await cluster.wait_node("n1", lambda n: n.state.drain)
    # the agent is gone; the hook keeps asking; a new agent must not give the node back
    assert not waiting.done()
    async with running_agent(cluster, s) as agent:
        await eventually(lambda: agent._startup_done, what="startup check")
        assert agent.drainer.active
        node = await cluster.client().node("n1")
        assert node is not None and node.state.drain
        go.touch()
        code, answer = await waiting
        assert (code, answer["result"]) == (0, "drained"), answer
    assert (await cluster.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED"})).state == "COMPLETED"


@pytest.mark.cluster(nodes=1)
async def test_node_without_a_record_counts_as_drained(cluster: DevCluster, sockdir) -> None:
    s = settings_for(cluster, sockdir, node="gone1")
    async with running_agent(cluster, s):
        code, answer = await hook(s, within=10)
        assert (code, answer["result"]) == (0, "no_record"), answer


@pytest.mark.cluster(nodes=1, max_node_count=4)
@pytest.mark.per_release("dynamic nodes (slurmd -Z) and their deletion changed between 22.05 and 23.x")
async def test_dynamic_node_record_is_deleted_after_the_drain(cluster: DevCluster, sockdir) -> None:
    await cluster.start_slurmd("d1", "-Z", "--conf", "CPUs=1 RealMemory=1000")
    await cluster.wait_node("d1", lambda n: n.state.registered and n.state.base == "IDLE")
    s = settings_for(cluster, sockdir, node="d1")  # dynamic: seen from slurmd's `-Z`, no flag needed
    async with running_agent(cluster, s):
        job, _ = await drained_under_a_job(cluster, s, "-w", "d1", wrap="sleep 2")
        assert await cluster.client().node("d1") is None
        await completed(cluster, job)


def _while_draining(agent: Agent) -> bool:
    # the admin's drain lands between the agent's look and its drain: a write with our reason would
    # replace theirs, and the time-out would then take the node DOWN and requeue the job
    return agent.drainer.active


def _at_the_deadline(agent: Agent) -> bool:
    # our drain is in place and the loop's look shows it, but an admin has just drained the node
    # for their own work: the DOWN that requeues jobs must not be sent
    rec = agent.drainer.record
    return rec is not None and time.time() >= rec.deadline


@pytest.mark.parametrize(
    "moment", [_while_draining, _at_the_deadline], ids=["on_the_drain", "at_the_deadline"]
)
@pytest.mark.cluster(nodes=1)
async def test_an_admins_drain_after_the_agents_last_look_is_kept(
    cluster: DevCluster, sockdir, moment: Callable[[Agent], bool]
) -> None:
    s = settings_for(cluster, sockdir, drain_timeout_policy="requeue")
    client = cluster.client()
    async with running_agent(cluster, s) as agent:
        job = await cluster.sbatch("-t", "2", wrap="sleep 100")
        await cluster.wait_job(job, "RUNNING")
        fired = stale_look_once(agent, lambda: moment(agent), lambda: client.drain(["n1"], "firmware update"))
        code, answer = await hook(s, within=2)
        assert fired, "the stale look was never served"
        await _kept_the_admins_drain(cluster, code, answer, job)


async def _kept_the_admins_drain(cluster: DevCluster, code: int, answer: Any, job: int) -> None:
    assert (code, answer["result"]) == (1, "timed_out"), answer
    assert "drained by someone else" in answer["detail"]
    node = await cluster.client().node("n1")
    assert node is not None and node.state.base != "DOWN"
    assert node.reason is not None and node.reason.text == "firmware update"
    assert (await cluster.wait_job(job, "RUNNING")).state == "RUNNING"


@pytest.mark.cluster(nodes=1)
async def test_time_out_never_overrides_someone_elses_drain(cluster: DevCluster, sockdir) -> None:
    s = settings_for(cluster, sockdir, drain_timeout_policy="requeue")
    client = cluster.client()
    async with running_agent(cluster, s):
        job = await cluster.sbatch("-t", "2", wrap="sleep 100")
        await cluster.wait_job(job, "RUNNING")
        await client.drain(["n1"], "firmware update")
        code, answer = await hook(s, within=2)
        await _kept_the_admins_drain(cluster, code, answer, job)
