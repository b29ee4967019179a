"""A DaemonSet worker's agent (`--node-name-from=kube-node`): its Slurm node name comes from its
Kubernetes Node (here the Node's override annotation), written for slurmd; a second pod on the
Node (a surge pod beside the one it replaces) waits: no name file, no slurmd started, no drain of
the other pod's node, readiness saying who holds it; once the old pod is gone it takes the same
name, and its slurmd registers as the same dynamic node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecars.devcluster import DevCluster
from sidecars.kube import KubeClient
from sidecars.kube.gpudomain import CLIQUE_LABEL
from sidecars.kube.nodename import ANNOTATION
from sidecars.worker import naming
from sidecars.worker.main import claim_check
from sidecars.worker.service import Agent
from sidecars.worker.settings import WorkerSettings
from tests.fakekube import FakeKube, configuration
from tests.helpers import RecordingEvents, eventually
from tests.worker.agents import hook, http_get, running, settings_for

WORKER = {"app.kubernetes.io/component": "worker"}
EARLY, LATE = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def ds_settings(cluster: DevCluster, sockdir: Path, pod: str, marker: Path) -> WorkerSettings:
    return settings_for(
        cluster,
        sockdir,
        node="",
        pod_name=pod,
        node_name_from="kube-node",
        kube_node="kube-a",
        registration_timeout_seconds=0.5,
        # the test replaces slurmd itself once the node is taken over: on a loaded machine that takes
        # more than the usual half second, and the agent must not heal meanwhile
        slurmd_missing_grace_seconds=30.0,
        # what would start this pod's slurmd: it must never run while another pod holds the node
        slurmd_restart_command=("sh", "-c", f"touch {marker}"),
    )


@pytest.mark.releases("slurm24")  # dynamic nodes; the claim rule is ours, one release shows it
@pytest.mark.cluster(shape="slinky", nodes=1, features={})
async def test_a_surge_pod_waits_for_the_node_and_then_takes_the_same_name(
    cluster: DevCluster, sockdir: Path, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_node("kube-a", annotations={ANNOTATION: "gpu-a"}, labels={CLIQUE_LABEL: "uuid-1.7"})
    fake.add_pod("ds-old", node_name="kube-a", labels=WORKER, created=EARLY)
    fake.add_pod("ds-new", node_name="kube-a", labels=WORKER, created=LATE)
    fake.add_pod("monitor", node_name="kube-a", labels={"app": "other"}, created=EARLY)  # not a worker
    await cluster.start_slurmd("gpu-a")  # the old pod's slurmd, running jobs
    await cluster.wait_node("gpu-a", lambda n: n.state.registered and n.state.base == "IDLE")
    job = await cluster.sbatch("-w", "gpu-a", "-t", "1", wrap="sleep 300")
    await cluster.wait_job(job, "RUNNING")
    marker = sockdir / "slurmd-started"
    async with KubeClient(configuration(url)) as kube:
        s = await naming.resolve(ds_settings(cluster, sockdir, "ds-new", marker), kube.get_node)
        assert s.node_name == "gpu-a"
        assert await naming.write_features(s, kube.get_node) == "nvlink-clique-uuid-1.7"
        events = RecordingEvents()
        agent = Agent(s, env=cluster.env, events=events, claim=claim_check(s, kube))
        async with running(agent, lambda: agent.http_port is not None, "the agent serving"):
            # not ready from the start ("not checked yet"): wait for the claim's own answer
            status, body = await eventually(
                lambda: http_get(agent, "/readyz"),
                lambda r: (
                    r[0] == 503 and "not checked yet" not in json.dumps(r[1]["checks"]["slurm_node_claim"])
                ),
                what="the claim checked",
            )
            assert "pod slurm/ds-old holds Slurm node gpu-a" in json.dumps(body), body
            assert events.reasons() == ["SlurmNodeClaimRefused"]
            status, body = await http_get(agent, "/livez")
            assert status == 200, body  # waiting is no reason to restart the agent
            # the hook of the waiting pod (a rollout giving up on it) drains nothing
            code, answer = await hook(s, within=10)
            assert (code, answer["result"]) == (0, "no_record"), answer
            assert "ds-old holds" in answer["detail"]
            node = await cluster.client().node("gpu-a")
            assert node is not None and not node.state.drain
            assert not (sockdir / naming.NAME_FILE).exists()  # its slurmd is not started
            assert not marker.exists() and agent.registration.status.state == "unknown"

            await cluster.scancel(job)
            fake.remove_pod("slurm", "ds-old")  # the old pod is gone: the new one takes its node over
            await eventually((sockdir / naming.NAME_FILE).exists, what="the name file for slurmd")
            assert (sockdir / naming.NAME_FILE).read_text() == "gpu-a\n"
            # the new pod's slurmd, as the overlay's script starts it: with the features file's Features=
            # the old pod's slurmd went with it, its hook having deleted the dynamic node's record (a
            # record that stays keeps its features on re-registration: the control plane's in-place
            # sync covers that case)
            await cluster.kill_slurmd("gpu-a")
            await cluster.client().delete_node("gpu-a")
            feature = (sockdir / naming.FEATURES_FILE).read_text().strip()
            cluster.spec.features["gpu-a"] = feature  # type: ignore[index]
            await cluster.start_slurmd("gpu-a")
            node = await cluster.wait_node("gpu-a", lambda n: n.state.registered and feature in n.features)
            assert set(node.features) == {"slinky", "nvlink-clique-uuid-1.7"}
            await eventually(lambda: agent.registration.status.state == "registered", what="registered")
            status, body = await eventually(
                lambda: http_get(agent, "/readyz"), lambda r: r[0] == 200, what="ready"
            )
            assert body["checks"]["slurm_node_claim"]["ok"] is True, body
        assert events.reasons() == ["SlurmNodeClaimRefused"]  # said once
        assert not marker.exists()  # registered as it was: nothing to heal
