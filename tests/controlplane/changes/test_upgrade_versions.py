"""The worker agent tells the control plane which release its slurmd runs, and the upgrade's version
skew guard rests on it: on the host (22.05) the agent runs the very binary's `-V`; a slurmd in a
chroot (whose binary cannot run from here, as from a sidecar container's own root) is left to its
node record, what it registered with."""

from __future__ import annotations

import pytest

from sidecars.devcluster import DevCluster
from sidecars.slurm import Version
from tests.controlplane.conftest import control_plane
from tests.fakekube import FakeKube
from tests.helpers import eventually
from tests.worker.agents import running_agent, settings_for, token_file


@pytest.mark.releases("slurm22", "slurm24")
@pytest.mark.cluster(nodes=2)
@pytest.mark.per_release("22.05 on the host runs slurmd -V; a chroot's slurmd is read from its node record")
async def test_an_agent_reports_its_slurmd_version_and_the_skew_guard_uses_it(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str], sockdir
) -> None:
    fake, url = fake_kube
    for node in ("n1", "n2"):
        fake.add_pod(
            f"worker-{node}", hostname=node, labels={"app": "slurmd", "controller-revision-hash": "old"}
        )
    record = await cluster.client().node("n1")
    assert record is not None and record.version
    running = str(Version.parse(record.version))
    runnable = cluster.release.root is None  # a chroot's slurmd: as from a sidecar's own root
    async with control_plane(cluster, kube_url=url) as cp:
        status, body = await cp.get("/v1/upgrade")
        assert status == 200 and body["versions"]["nodes"]["n1"] == {"agent": None, "record": running}
        # the agent proves it is worker-n1's with that pod's own ServiceAccount token
        agent_token = token_file(sockdir, fake.issue_token("worker-n1"))
        s = settings_for(cluster, sockdir, control_plane=cp.url, token_file=agent_token)
        async with running_agent(cluster, s) as agent:
            slurmd = agent.slurmd.find(record=False)
            assert slurmd is not None
            await eventually(lambda: agent.slurmd_version._asked == slurmd, what="slurmd's release asked")
            if runnable:
                status, body = await eventually(
                    lambda: cp.get("/v1/upgrade"),
                    lambda r: r[1]["versions"]["nodes"]["n1"]["agent"] is not None,
                    what="the agent's report",
                )
                assert body["versions"]["nodes"]["n1"] == {"agent": running, "record": running}
                assert agent.status()["slurmd_version"] == {"version": running, "pid": slurmd}
            else:  # not runnable from here: nothing reported, the record (what it registered) stands
                status, body = await cp.get("/v1/upgrade")
                assert body["versions"]["nodes"]["n1"] == {"agent": None, "record": running}
                assert agent.status()["slurmd_version"] is None
            assert body["versions"]["controller"] == running
            assert body["versions"]["nodes"]["n2"]["agent"] is None  # no agent: the record stands
        # an agent whose slurmd runs a newer release than slurmctld (its record not yet re-registered)
        # stops the roll, with nothing written
        status, text = await cp.post(
            "/v1/nodes/n2/report",
            {"pod_namespace": "slurm", "pod_name": "worker-n2", "slurmd_version": "99.05.1"},
        )
        assert status == 204, text
        status, text = await cp.post("/v1/upgrade", {"revision": "new", "budget": "1"})
        assert status == 409 and "older than slurmd 99.05.1 on n2" in text, text
        assert fake.config_maps == {}
