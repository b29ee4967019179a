"""The worker agent beside a Slinky-shaped worker: a configless `slurmd -Z` that registers itself,
is healed when it does not, is drained by the hook and then leaves no record; slurmd's own /readyz
in readiness where it serves one; the pod identity Slinky writes in the node's Comment."""

from __future__ import annotations

import json

import pytest

from sidecars.devcluster import DevCluster
from sidecars.worker.service import Agent
from tests.helpers import eventually
from tests.worker.agents import (
    completed,
    drained_under_a_job,
    http_get,
    registered_by_its_restart,
    running_agent,
    settings_for,
)

pytestmark = pytest.mark.releases("slurm24", "slurm26")


def readyz_method(cluster: DevCluster) -> str:
    return "readyz" if cluster.release.short >= "25.11" else "node_state"


async def readiness_source(agent: Agent) -> str | None:
    """The source `slurm_sidecars_worker_slurmd_readiness_source` marks 1, from the agent's /metrics."""
    _, text = await http_get(agent, "/metrics")
    for line in text.splitlines():
        if line.startswith("slurm_sidecars_worker_slurmd_readiness_source{") and line.endswith(" 1.0"):
            return line.split('source="', 1)[1].split('"', 1)[0]
    return None


@pytest.mark.cluster(shape="slinky", nodes=1)
@pytest.mark.per_release("each release's dynamic registration, and slurmd's /readyz on 26.05 only")
async def test_a_worker_that_never_registered_is_started_and_registers_as_a_dynamic_node(
    cluster: DevCluster, sockdir
) -> None:
    command = tuple(cluster.slurmd_argv("w2"))  # the pod's configless slurmd -Z, not running yet
    async with registered_by_its_restart(cluster, sockdir, "w2", command) as agent:
        node = await cluster.client().node("w2")
        assert node is not None and "DYNAMIC_NORM" in node.state.flags and "slinky" in node.features
        await eventually(lambda: agent.slurmd_health.method != "unknown", what="the health method")
        if readyz_method(cluster) == "readyz":
            await eventually(lambda: agent.slurmd_health.answer is not None, what="slurmd's /readyz asked")
        status, body = await http_get(agent, "/readyz")
        assert status == 200, body
        _, st = await http_get(agent, "/status")
        assert st["slurmd_health"]["method"] == readyz_method(cluster)
        if st["slurmd_health"]["method"] == "readyz":
            # 26.05's slurmd gives its words to /readyz?verbose without a token (200; measured)
            assert st["slurmd_health"]["ok"] is True
            assert st["slurmd_health"]["detail"].startswith("200 from http://127.0.0.1:"), st
            assert "workers: threads:" in st["slurmd_health"]["words"], st
            assert st["slurmd_health"]["no_words"] is None, st
        else:
            assert st["slurmd_health"]["words"] is None, st
        source = "verbose" if readyz_method(cluster) == "readyz" else "registration"
        await eventually(lambda: readiness_source(agent), lambda s: s == source, what=f"source {source}")


@pytest.mark.cluster(shape="slinky", nodes=1)
@pytest.mark.per_release("each release's configless slurmd re-registering as a dynamic node")
async def test_a_killed_configless_slurmd_is_restarted_and_registers_again(
    cluster: DevCluster, sockdir
) -> None:
    s = settings_for(cluster, sockdir, slurmd_restart_command=tuple(cluster.slurmd_argv("n1")))
    async with running_agent(cluster, s) as agent:
        await eventually(lambda: agent.registration.status.state == "registered", what="registered")
        await cluster.kill_slurmd("n1")
        await eventually(lambda: agent.registration.status.heal_attempts >= 1, what="a restart")
        await cluster.wait_node("n1", lambda n: n.state.registered and n.state.base == "IDLE")
        await eventually(lambda: agent.registration.status.state == "registered", what="registered again")
        job = await cluster.sbatch("-w", "n1", "-t", "1", wrap="true")
        assert (await cluster.wait_job(job, {"COMPLETED", "FAILED"}, timeout=60)).state == "COMPLETED"


@pytest.mark.cluster(shape="slinky", nodes=2)
@pytest.mark.per_release("each release's rules for deleting a dynamic node's record")
async def test_the_drain_hook_drains_a_dynamic_worker_and_its_record_is_deleted(
    cluster: DevCluster, sockdir
) -> None:
    s = settings_for(cluster, sockdir, node="n2")  # dynamic: seen from slurmd's `-Z`, no flag needed
    async with running_agent(cluster, s):
        job, _ = await drained_under_a_job(cluster, s, "-w", "n2", wrap="sleep 2")
        assert await cluster.client().node("n2") is None
        await completed(cluster, job)
        assert [n.name for n in await cluster.client().nodes()] == ["n1"]


def identity(pod: str) -> str:
    # as Slinky's operator writes it (Go's encoding/json: no spaces)
    return json.dumps({"namespace": "slurm", "podName": pod, "node": "kube-a"}, separators=(",", ":"))


@pytest.mark.cluster(shape="slinky", nodes=1)
async def test_the_pod_identity_in_the_nodes_comment_is_read_and_a_foreign_one_fails_readiness(
    cluster: DevCluster, sockdir
) -> None:
    client = cluster.client()
    await client.update_nodes(["n1"], comment=identity("worker-n1"))
    s = settings_for(cluster, sockdir)  # pod slurm/worker-n1
    async with running_agent(cluster, s) as agent:
        await eventually(lambda: agent.slurmd_health.identity is not None, what="the identity read")
        _, st = await http_get(agent, "/status")
        assert st["slurmd_health"]["pod_identity"] == {
            "namespace": "slurm",
            "podName": "worker-n1",
            "node": "kube-a",
        }
        status, body = await http_get(agent, "/readyz")
        assert status == 200, body
        await client.update_nodes(["n1"], comment=identity("worker-n7"))
        await eventually(lambda: agent.slurmd_health.identity_mismatch, within=20, what="the new identity")
        status, body = await http_get(agent, "/readyz")
        assert status == 503, body
        assert "names pod slurm/worker-n7" in json.dumps(body)


@pytest.mark.releases("slurm26")
@pytest.mark.cluster(shape="slinky", nodes=1, extra_conf="PrivateData=jobs")
async def test_under_private_data_slurmd_gives_no_words_and_the_status_says_why(
    cluster: DevCluster, sockdir
) -> None:
    async with running_agent(cluster, settings_for(cluster, sockdir)) as agent:
        await eventually(lambda: agent.slurmd_health.answer is not None, what="slurmd's /readyz asked")
        _, st = await http_get(agent, "/status")
        health = st["slurmd_health"]
        assert health["method"] == "readyz" and health["ok"] is True, st
        assert health["detail"].startswith("204 from http://127.0.0.1:") and health["words"] is None, st
        assert health["no_words"] == "/readyz?verbose gave no words (slurmd gives none under PrivateData)", st
        await eventually(lambda: readiness_source(agent), lambda s: s == "plain", what="source plain")
