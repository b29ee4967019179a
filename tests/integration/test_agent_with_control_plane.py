"""The worker agent and the real control plane together, against real Slurm: the agent's requests
are what the control plane's contract (docs/control-plane.md) accepts, and it proves who it is with
its pod's projected ServiceAccount token (reviewed by the fake API server)."""

from __future__ import annotations

import pytest

from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import control_plane
from tests.fakekube import FakeKube
from tests.helpers import RecordingEvents, eventually
from tests.worker.agents import hook, running_agent, settings_for, slurm_commands, token_file

OLD_POD_REASON = "slurm-sidecars: pod slurm/worker-n1 terminating: scale-in"


def agent_token(fake: FakeKube) -> str:
    """The worker pods of n1 and n2 (as settings_for names them), and the n1 pod's agent token."""
    for node in ("n1", "n2"):
        fake.add_pod(f"worker-{node}", hostname=node)
    return fake.issue_token("worker-n1")


@pytest.mark.cluster(nodes=2)
async def test_a_drain_left_by_an_earlier_pod_is_given_back_through_the_control_plane(
    cluster: DevCluster, sockdir, fake_kube: tuple[FakeKube, str]
) -> None:
    client = cluster.client()
    await client.drain(["n1"], OLD_POD_REASON)  # a scale-in that was cancelled: the pod came back
    await client.drain(["n2"], "admin: memory errors")
    events = RecordingEvents()
    fake, url = fake_kube
    identity = agent_token(fake)
    async with control_plane(cluster, kube_url=url) as cp:
        s = settings_for(cluster, sockdir, control_plane=cp.url, token_file=token_file(sockdir, identity))
        async with running_agent(cluster, s, events) as agent:
            await eventually(lambda: agent._startup_done, what="startup check")
            assert agent.source.mode == "control-plane"
            await cluster.wait_node("n1", lambda n: not n.state.drain)
            assert events.reasons() == ["Undrained"]
            assert "scontrol update" not in slurm_commands(agent)  # the control plane wrote it
    n2 = await client.node("n2")
    assert n2 is not None and n2.state.drain
    assert n2.reason is not None and n2.reason.text == "admin: memory errors"


@pytest.mark.cluster(nodes=2)
async def test_the_drain_hook_through_the_control_plane_waits_for_the_job(
    cluster: DevCluster, sockdir, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    identity = agent_token(fake)
    async with control_plane(cluster, kube_url=url) as cp:
        s = settings_for(cluster, sockdir, control_plane=cp.url, token_file=token_file(sockdir, identity))
        async with running_agent(cluster, s) as agent:
            job = await cluster.sbatch("-w", "n1", "-t", "1", wrap="sleep 3")
            await cluster.wait_job(job, "RUNNING")
            code, answer = await hook(s, within=60, reason="scale-in")
            assert (code, answer["result"]) == (0, "drained"), answer
            assert (await cluster.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED"})).state == "COMPLETED"
            assert "scontrol update" not in slurm_commands(agent)
            assert agent.metrics.fallbacks._value.get() == 0
            # counted once the write's command returned, which Slurm's drain (and so the hook) can beat
            await cp.counted(
                "slurm_sidecars_drain_batches_total", what="the drain counted", action="drain", result="ok"
            )
            assert cp.sample("slurm_sidecars_drain_batches_total", action="drain", result="ok") == 1
    node = await cluster.client().node("n1")
    assert node is not None and node.state.drained
    assert (
        node.reason is not None
        and node.reason.text == "slurm-sidecars: pod slurm/worker-n1 terminating: scale-in"
    )
