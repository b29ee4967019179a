"""Node records kept clean, on real dynamic nodes (the Slinky shape, 24.11 and 26.05) and the fake API server:
a ghost's record (its pod gone, its slurmd dead) is deleted; a delete is refused while a pending job
names the node (Slurm itself would take the delete, and kill the job at the next reconfigure); a node
registered without the GPUs its pod asks for is drained with a reason naming the GRES, and is given
back once it registers them."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sidecars.devcluster import DevCluster, slinky
from tests.controlplane.conftest import control_plane
from tests.controlplane.reconcile.settle import drains, settled
from tests.fakekube import FakeKube
from tests.helpers import eventually

# dynamic nodes need the Slinky shape (23.11+, so not 22.05); what Slurm answers (squeue's ReqNodeList,
# the delete, a bare registration) is shown on both releases that have it
pytestmark = [pytest.mark.releases("slurm24", "slurm26")]
# the recycler's production grace: the suite's 0.5 s would recycle a worker pod whose record is being
# remade (gone from Slurm until its slurmd registers again, seconds on a loaded machine), and its pod
# with it the record keeper's word that it healed
RECORDS: dict[str, Any] = {
    "records": {"grace_seconds": 1.0},
    "pod_name": "cp-0",
    "recycle": {"grace_seconds": 300.0},
}


def workers(fake: FakeKube, count: int, gpus: int = 0) -> None:
    fake.add_node("k1")
    for i in range(1, count + 1):
        pod = fake.add_pod(f"w{i}", hostname=f"n{i}", node_name="k1")
        if gpus:
            pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}


def events(fake: FakeKube, reason: str) -> list[dict[str, Any]]:
    return [e for e in fake.events if e["reason"] == reason]


async def names(cluster: DevCluster) -> set[str]:
    return {n.name for n in await cluster.client().nodes()}


@pytest.mark.cluster(shape="slinky", nodes=4)
@pytest.mark.per_release("each release's rules for deleting a dynamic node that a job names")
async def test_a_ghost_record_is_deleted_and_one_a_pending_job_names_is_kept(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    workers(fake, 4)
    async with control_plane(cluster, url, **RECORDS) as cp:
        await eventually(lambda: cp.leading("records"), what="leader with its pods")
        await eventually(lambda: cp.plane.writers["records"].known, lambda k: len(k) == 4, what="4 held")  # type: ignore[attr-defined]
        pending = await cluster.sbatch("-w", "n4", "--hold")  # a job that names n4 and waits
        for pod, node in (("w3", "n3"), ("w4", "n4")):  # lost without their preStop hooks
            await cluster.kill_slurmd(node)
            fake.remove_pod("slurm", pod)
        await eventually(lambda: names(cluster), lambda ns: "n3" not in ns, what="n3's record deleted")
        (kept,) = await eventually(lambda: events(fake, "SlurmRecordKept"), what="n4 kept")
        assert f"jobs {pending} hold or name it" in kept["message"] and "n4" in kept["message"]
        await settled(cp)
        assert await names(cluster) == {"n1", "n2", "n4"}
        (deleted,) = events(fake, "SlurmRecordDeleted")
        assert "n3" in deleted["message"] and deleted["involvedObject"]["name"] == "cp-0"
        assert cp.sample("slurm_sidecars_node_record_actions_total", action="deleted") == 1
        assert cp.sample("slurm_sidecars_node_record_actions_total", action="kept") == 1
        _, body = await cp.get("/status")
        assert body["records"]["kept_for_jobs"] == {"n4": [pending]}
        assert body["records"]["orphaned"] == ["n4"]

        # the job goes: the record follows; the live workers' stay
        await cluster.scancel(pending)
        await eventually(lambda: names(cluster), lambda ns: ns == {"n1", "n2"}, what="n4's record deleted")
        # Slurm shows the record gone before our delete's command has returned and been counted
        await settled(cp)
        assert cp.sample("slurm_sidecars_node_record_actions_total", action="deleted") == 2


@pytest.mark.cluster(shape="slinky", nodes=3, gpus=2)
@pytest.mark.per_release("each release's registration of a dynamic node's GRES")
async def test_a_node_registered_without_its_gpus_is_held_out_then_remade_and_given_back(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    workers(fake, 3, gpus=2)
    # n2's slurmd registers before its devices are there: `Gres=(null)`, and Slurm takes it as IDLE
    client = cluster.client()
    await cluster.kill_slurmd("n2")
    await client.delete_node("n2")
    assert cluster.ports is not None
    bare = slinky.node_conf(dataclasses.replace(cluster.spec, gpus=0), "n2", cluster.ports.nodes["n2"])
    await cluster.start_slurmd("n2", "--conf", bare)  # the later --conf is the one slurmd takes
    node = await cluster.wait_node("n2", lambda n: n.state.base == "IDLE" and not n.gres, what="n2 bare")
    assert not node.state.drain  # what Slurm does by itself: the bug

    async with control_plane(cluster, url, **RECORDS) as cp:
        await eventually(lambda: cp.leading("records"), what="leader with its pods")
        # held out at once with the GRES in its reason; then, idle and drained, its record is remade
        short = await eventually(lambda: events(fake, "SlurmGresShort"), what="the GRES event")
        assert {(e["involvedObject"]["name"], "gpu:0" in e["message"]) for e in short} == {("w2", True)}
        await eventually(lambda: names(cluster), lambda ns: "n2" not in ns, what="n2's record deleted")
        assert cp.sample("slurm_sidecars_node_record_actions_total", action="gres_drain") == 1
        assert not drains(await client.nodes())  # n1 and n3 registered theirs
        # (the bare slurmd may register again before it is restarted, and be remade again: same words);
        # the Event is told once the delete's command has returned, after Slurm shows the record gone
        deleted = {e["message"] for e in await eventually(lambda: events(fake, "SlurmRecordDeleted"))}
        assert deleted == {"Slurm node n2's record deleted: its pod asks for GPUs it did not register"}

        # as the agent does for a node gone from Slurm: its slurmd restarted, now with its GPUs
        await cluster.kill_slurmd("n2")
        await cluster.start_slurmd("n2")
        node = await cluster.wait_node("n2", lambda n: n.gres == "gpu:2" and n.state.base == "IDLE")
        await eventually(lambda: events(fake, "SlurmGresHealed"), what="told healed")
        await settled(cp)
        assert not drains(await client.nodes())
        _, body = await cp.get("/status")
        assert body["records"]["gres_short"] == {}


@pytest.mark.cluster(shape="slinky", nodes=3, gpus=2)
@pytest.mark.per_release("each release's registration of a dynamic node's GRES")
async def test_a_gpu_short_node_that_a_job_names_stays_drained_with_the_gres_in_its_reason(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    workers(fake, 2, gpus=4)  # two pods ask for more than their nodes registered
    fake.add_pod("w3", hostname="n3", node_name="k1")
    pending = await cluster.sbatch("-w", "n1,n2", "-N", "2", "--hold")
    async with control_plane(cluster, url, **RECORDS) as cp:
        await eventually(lambda: cp.leading("records"), what="leader with its pods")
        reason = "slurm-sidecars: gres registered gpu:2, its pod asks for gpu:4"
        await cluster.wait_nodes(lambda ns: drains(ns) == {"n1": reason, "n2": reason}, what="both drained")
        await eventually(lambda: events(fake, "SlurmRecordKept"), lambda es: len(es) == 2, what="both kept")
        await settled(cp)
        assert await names(cluster) == {"n1", "n2", "n3"}  # the job names them: no record is remade
        assert cp.sample("slurm_sidecars_node_records", state="gres_short") == 2

        # the pods' ask is lowered to what registered (a new spec): our drains are lifted, nothing else
        for pod in ("w1", "w2"):
            obj = fake.pods[("slurm", pod)]
            obj["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
            fake.touch_pod(obj)
        await cluster.wait_nodes(lambda ns: not drains(ns), what="undrained")
        await settled(cp)  # the Events and counts follow the writes Slurm already shows
        assert len(events(fake, "SlurmGresHealed")) == 2
        assert cp.sample("slurm_sidecars_node_record_actions_total", action="gres_undrain") == 2
        await cluster.scancel(pending)
