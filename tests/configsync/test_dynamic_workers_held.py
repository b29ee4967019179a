"""In the Slinky shape a worker is a dynamic node, defined by its registration, not by slurm.conf: a
set that redefines a busy one (a static NodeName line for it, or NodeSets that no longer take it
into its job's partition) would cut it off and requeue its job. Such a set is held for the job, as
one that redefines a busy static node is."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.configsync.fileset import conffile
from sidecars.configsync.judge import jobs
from sidecars.devcluster import DevCluster
from sidecars.slurm.models import JobPlacement
from tests.configsync.harness import config_sync, key_secret, read_set, set_sha

SLINKY = {"shape": "slinky", "nodes": 2, "nodesets": {"n2": "spare"}}


def _conf(text: str) -> conffile.SlurmConf:
    return conffile.parse(read_set({"slurm.conf": text.encode()}), "slurm.conf", Path("/etc/slurm"))


SETS = "NodeSet=gpu Feature=gpu\nNodeSet=cpu Nodes=w[1-4]\n"
OLD = _conf(SETS + "PartitionName=a Nodes=gpu,cpu\n")


@pytest.mark.parametrize(
    ("new", "why"),
    [
        (
            "NodeSet=gpu Feature=h100\nNodeSet=cpu Nodes=w[1-4]\nPartitionName=a Nodes=gpu,cpu\n",
            "leave partition a",
        ),
        (
            "NodeSet=gpu Feature=gpu\nNodeSet=cpu Nodes=w[1-4]\nPartitionName=a Nodes=cpu\n",
            "leave partition a",
        ),
        ("NodeSet=gpu Feature=gpu\nPartitionName=a Nodes=gpu,cpu\nNodeName=g1 CPUs=8\n", "static NodeName"),
    ],
)
def test_a_busy_dynamic_node_redefined_holds_its_job(new: str, why: str) -> None:
    placed = [JobPlacement(7, "RUNNING", ("a",), ("g1",), "", "normal")]
    risk = jobs.compare(OLD, _conf(new), placed, {}, {"g1": ("gpu", "rack1")})
    assert list(risk) == [7] and why in risk[7] and "g1" in risk[7]


def test_a_dynamic_node_still_taken_or_idle_holds_nothing() -> None:
    new = _conf(
        "NodeSet=gpu Feature=gpu\nNodeSet=cpu Nodes=w[1-4]\nPartitionName=a Nodes=gpu,cpu MaxTime=60\n"
    )
    placed = [
        JobPlacement(7, "RUNNING", ("a",), ("g1",), "", "normal"),  # still in through its Feature
        JobPlacement(8, "RUNNING", ("a",), ("w3",), "", "normal"),  # in by name through NodeSet cpu
        JobPlacement(9, "PENDING", ("a",), (), "", "normal"),
    ]
    assert jobs.compare(OLD, new, placed, {}, {"g1": ("gpu",), "w3": ()}) == {}
    moved = _conf("NodeSet=gpu Feature=gpu\nNodeSet=cpu Nodes=w[1-2]\nPartitionName=a Nodes=ALL\n")
    assert jobs.compare(OLD, moved, placed, {}, {"g1": ("gpu",), "w3": ()}) == {}  # ALL takes every node


@pytest.mark.releases("slurm24", "slurm26")
@pytest.mark.timeout(240)
@pytest.mark.cluster(**SLINKY)
@pytest.mark.per_release("each release's NodeSets and dynamic-node definitions")
async def test_sets_that_redefine_a_busy_worker_are_held_for_its_job(cluster: DevCluster) -> None:
    job = await cluster.sbatch("-w", "n1", "-p", "debug", wrap="sleep 600")
    await cluster.wait_job(job, "RUNNING", timeout=30)
    secrets = key_secret(cluster)
    async with config_sync(cluster, secrets=secrets) as sync:
        base = sync.good()
        conf = base["slurm.conf"]
        port = cluster.ports.nodes["n1"] if cluster.ports else 0
        candidates = {
            # the worker given a static line: slurmctld would no longer know it as the pod registered it
            "static line": conf
            + f"NodeName=n1 NodeAddr=127.0.0.1 Port={port} CPUs=1 RealMemory=1000 State=UNKNOWN\n".encode(),
            # its NodeSet matched through another feature: the partition no longer takes it
            "feature": conf.replace(b"NodeSet=slinky Feature=slinky", b"NodeSet=slinky Feature=renamed"),
        }
        for what, text in candidates.items():
            assert text != conf, what
            files = {**base, "slurm.conf": text}
            sync.config.write(files)
            st = await sync.wait(set_sha(files, secrets), key="rejected", within=60)
            reason = st["rejected"]["reason"]
            assert st["held_for_jobs"] == [job], (what, reason)
            assert reason.startswith("held:") and "dynamic node n1" in reason, (what, reason)
        assert (await cluster.wait_job(job, "RUNNING")).nodes == ("n1",)
        # a change that leaves the worker where it is still applies
        files = {**base, "slurm.conf": conf.replace(b"MaxTime=INFINITE", b"MaxTime=50")}
        sync.config.write(files)
        await sync.wait(set_sha(files, secrets), within=60)
    assert (await cluster.wait_job(job, "RUNNING")).nodes == ("n1",)
