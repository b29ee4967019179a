"""In the Slinky shape the workers fetch their files from slurmctld: a change is applied only when
every responding worker runs it, and a worker that did not take it is named in /status."""

from __future__ import annotations

import time

import pytest

from sidecars.configsync.apply.workers import judge
from sidecars.devcluster import DevCluster
from sidecars.slurm import Node, NodeState
from tests.configsync.harness import config_sync, key_secret, set_sha

SLINKY = {"shape": "slinky", "nodes": 3, "gpus": 2}
pytestmark = pytest.mark.releases("slurm24", "slurm26")


def method_for(cluster: DevCluster) -> str:
    return "slurmd_start_time+readyz" if cluster.release.short >= "25.11" else "slurmd_start_time"


@pytest.mark.cluster(**SLINKY)
@pytest.mark.per_release("each release's configless fetch on reconfigure")
async def test_a_slurm_conf_and_a_gres_conf_change_reach_every_configless_worker(
    cluster: DevCluster,
) -> None:
    job = await cluster.sbatch("-w", "n1", "--gres=gpu:1", wrap="sleep 300")
    await cluster.wait_job(job, "RUNNING", timeout=30)
    secrets = key_secret(cluster)
    async with config_sync(cluster, secrets=secrets) as sync:
        files = sync.good()
        files["slurm.conf"] = files["slurm.conf"].replace(b"MaxTime=INFINITE", b"MaxTime=45")
        files["gres.conf"] = b"# generation 2: one line per GPU\n" + files["gres.conf"]
        sync.config.write(files)
        st = await sync.wait(set_sha(files, secrets), within=20)
        assert st["workers"]["method"] == method_for(cluster)
        assert st["workers"]["taken"] == ["n1", "n2", "n3"]
        assert st["workers"]["not_taken"] == {} and st["workers"]["not_responding"] == {}
        assert (await cluster.client().partitions())[0].max_time_minutes == 45
        for name in cluster.node_names:  # what each configless slurmd fetched and now runs
            cache = cluster.dir / "spool" / name / "conf-cache"
            assert (cache / "gres.conf").read_bytes() == files["gres.conf"], name
            assert b"MaxTime=45" in (cache / "slurm.conf").read_bytes(), name
        assert (await cluster.wait_job(job, "RUNNING")).nodes == ("n1",)  # the job lived through it


@pytest.mark.cluster(**SLINKY)
@pytest.mark.per_release("each release's configless workers and what they report of their config")
async def test_a_worker_that_did_not_take_the_change_is_named(cluster: DevCluster) -> None:
    secrets = key_secret(cluster)
    async with config_sync(cluster, secrets=secrets) as sync:
        pid = await cluster.kill_slurmd("n3")  # gone, and slurmctld has not noticed yet
        assert pid
        node = await cluster.client().node("n3")
        assert node is not None and node.state.registered
        files = sync.good()
        files["slurm.conf"] = files["slurm.conf"].replace(b"MaxTime=INFINITE", b"MaxTime=30")
        sync.config.write(files)
        st = await sync.wait(set_sha(files, secrets), within=20)
        workers = st["workers"]
        assert "n3" in workers["not_responding"] and "n3" not in workers["taken"], workers
        # the others took it (on a loaded machine one may be slow to answer /readyz: named too)
        assert set(workers["taken"]) | set(workers["not_responding"]) == {"n1", "n2", "n3"}, workers
        assert workers["not_taken"] == {}, workers


def _node(name: str, state: str, started: int | None) -> Node:
    st = NodeState.parse(state)
    return Node(name, st, None, 1, 0, 1000, (), (), "", "", "127.0.0.1", "h", (), None, started, None)


def test_a_responding_worker_still_on_the_old_start_is_not_taken() -> None:
    now = int(time.time())
    verdict = judge(
        [
            _node("a", "IDLE+DYNAMIC_NORM", now),
            _node("b", "ALLOCATED+DYNAMIC_NORM", now - 30),
            _node("c", "IDLE+DYNAMIC_NORM+NOT_RESPONDING", now - 30),
            _node("d", "FUTURE", None),
        ],
        since=now + 0.4,
    )
    assert verdict.taken == ["a"]
    assert list(verdict.not_taken) == ["b"] and "before the reconfigure" in verdict.not_taken["b"]
    assert list(verdict.not_responding) == ["c"]
    assert not verdict.ok and verdict.reason().startswith("worker b did not take the change")


def test_a_worker_with_no_start_time_is_waited_for_then_named_not_responding() -> None:
    # its slurmd is dead and slurmctld has not marked it yet: after 24.11's re-exec it has no start
    # time. Not a worker that refused the change: it answers nobody (seen on a loaded machine)
    now = int(time.time())
    verdict = judge([_node("a", "IDLE+DYNAMIC_NORM", now), _node("n3", "IDLE+DYNAMIC_NORM", None)], now)
    assert verdict.ok and not verdict.settled and verdict.unregistered == ["n3"]  # still waited for
    verdict.give_up_waiting()
    assert verdict.settled and verdict.taken == ["a"] and verdict.not_taken == {}
    assert list(verdict.not_responding) == ["n3"] and "no registration" in verdict.not_responding["n3"]
