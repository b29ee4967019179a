"""Verification at the size our users run: node records in every state beside the real nodes, and
the fleet read once per verification (the node list is the one read that grows with the cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.configsync.apply.applier import Applier, few, node_mismatches, unlisted_added
from sidecars.configsync.apply.views import SlurmView, view
from sidecars.configsync.fileset import conffile
from sidecars.devcluster import DevCluster
from sidecars.slurm import Node, NodeState, Reason, SlurmClient
from tests.configsync.harness import cluster_files, config_sync, read_set, set_sha

# records in every state a large cluster has: not provisioned (DOWN), drained, not existing yet
# (FUTURE: Slurm never lists them), cloud nodes (powered down until used; 22.05 does not list them)
RECORDS = {"DOWN": 300, "FUTURE": 300, "CLOUD": 40, "DRAIN": 20}
# a static node whose slurmd never started: UNKNOWN, not responding, never registered
LATE = "NodeName=late1 NodeAddr=127.0.0.1 Port=9 CPUs=1 RealMemory=100 State=UNKNOWN\n"


def max_time(files: dict[str, bytes], minutes: int) -> dict[str, bytes]:
    conf = files["slurm.conf"]
    assert b"PartitionName=debug" in conf
    return {**files, "slurm.conf": conf.replace(b"MaxTime=INFINITE", f"MaxTime={minutes}".encode(), 1)}


@pytest.mark.timeout(240)
@pytest.mark.cluster(node_records=RECORDS, extra_conf=LATE)
@pytest.mark.per_release(
    "23.11+ restarts slurmd at a reconfigure (each worker judged) and takes added nodes; 22.05 must "
    "restart for them and lists no CLOUD record"
)
async def test_a_change_applies_beside_records_in_every_state(cluster: DevCluster) -> None:
    async with config_sync(cluster) as sync:
        files = max_time(sync.good(), 45)
        sync.config.write(files)
        st = await sync.wait(set_sha(files), within=30)
        assert st["rejected"] is None and st["applied"]["generation"] == 2
        assert (await cluster.client().partitions())[0].max_time_minutes == 45
        workers = st["workers"]
        if cluster.release.short >= "23.11":  # a reconfigure restarts slurmd there: each is judged
            # only the workers that ran a slurmd before the change; no record is waited for or named
            assert sorted(workers["taken"]) == ["n1", "n2", "n3"], workers
            assert workers["not_responding"] == {} and workers["not_taken"] == {}, workers
        # a change that adds FUTURE records is applied too (Slurm lists none of them); 22.05 must
        # restart for any node added, and says so in a few words
        more = {**files, "slurm.conf": files["slurm.conf"] + b"NodeName=y[001-200] CPUs=8 State=FUTURE\n"}
        sync.config.write(more)
        if cluster.release.short == "22.05":
            st = await sync.wait(set_sha(more), key="rejected", within=60)
            reason = st["rejected"]["reason"]
            assert st["restart_required"] and "nodes added: y[001-" in reason and len(reason) < 200, st
        else:
            st = await sync.wait(set_sha(more), key="applied", within=60)
            assert st["rejected"] is None


@pytest.mark.timeout(240)
@pytest.mark.cluster(node_records={"DOWN": 500, "FUTURE": 500})
@pytest.mark.per_release(
    "the verification after a reconfigure is each release's: 23.11+ re-execs slurmctld and restarts "
    "slurmd, 22.05 rereads in place; the fleet is read once on each"
)
async def test_the_fleet_is_read_once_per_verification(cluster: DevCluster) -> None:
    reads: list[str] = []

    class Counting(SlurmClient):
        async def nodes(self) -> list[Node]:
            reads.append("nodes")
            return await super().nodes()

        async def node_listing(self) -> list[Node]:
            reads.append("nodes")
            return await super().node_listing()

    client = Counting(env=cluster.env)
    before = await view(client)
    old_files = cluster_files(cluster)
    new_files = max_time(old_files, 30)
    target = cluster.conf_path.parent
    old = conffile.parse(read_set(old_files), "slurm.conf", target)
    new = conffile.parse(read_set(new_files), "slurm.conf", target)
    cluster.conf_path.write_bytes(new_files["slurm.conf"])
    applier = Applier(client, settle_seconds=0.5, restart_timeout=10.0)
    reads.clear()
    outcome = await applier.reconfigure(old, new, before)
    assert outcome.ok, outcome.reason
    assert reads == ["nodes"]
    assert (await client.partitions())[0].max_time_minutes == 30


def _node(name: str, state: str, reason: str | None = None) -> Node:
    return Node(
        name, NodeState.parse(state), Reason(reason) if reason else None,
        1, 0, 1000, (), (), "", "", "127.0.0.1", "h", (), None, 1, None,
    )  # fmt: skip


def _conf(text: str) -> conffile.SlurmConf:
    files = {"slurm.conf": text.encode()}
    return conffile.parse(read_set(files), "slurm.conf", Path("/etc/slurm"))


def test_a_reason_names_a_few_nodes_then_how_many_more() -> None:
    assert few(["b", "a"]) == "a, b"
    assert few([f"x{i:04d}" for i in range(1, 1001)]) == "x0001, x0002, x0003, x0004, x0005 and 995 more"
    conf = _conf("NodeName=x[0001-1000] CPUs=1\n")
    before_nodes = {f"x{i:04d}": _node(f"x{i:04d}", "IDLE") for i in range(1, 1001)}
    after = {n: _node(n, "DOWN", "Not responding") for n in before_nodes}
    problems = node_mismatches(conf, conf, SlurmView({}, {}, before_nodes), after)
    assert problems == ["nodes x0001, x0002, x0003, x0004, x0005 and 995 more went DOWN (Not responding)"]


def test_nodes_that_never_answered_are_not_blamed_for_going_down() -> None:
    conf = _conf("NodeName=a,b,c,d,e,f CPUs=1\n")
    before = {
        "a": _node("a", "DOWN", "not_provisioned"),
        "b": _node("b", "UNKNOWN+NOT_RESPONDING"),
        "c": _node("c", "IDLE+CLOUD+POWERED_DOWN"),
        "d": _node("d", "IDLE*"),
        "e": _node("e", "IDLE+POWERING_UP"),
        "f": _node("f", "IDLE"),
    }
    after = {n: _node(n, "DOWN", "Not responding") for n in before}
    assert node_mismatches(conf, conf, SlurmView({}, {}, before), after) == [
        "node f went DOWN (Not responding)"
    ]


def test_only_listed_states_are_looked_up_when_a_change_adds_nodes() -> None:
    old = _conf("NodeName=a CPUs=1\nNodeName=f[1-3] State=FUTURE\n")
    new = _conf(
        "NodeName=a CPUs=1\nNodeName=f[1-3] State=FUTURE\nNodeName=g[1-2] State=future\n"
        "NodeName=c1 State=CLOUD\nNodeName=n[1-7] CPUs=2\n"
    )
    # unchanged FUTURE records and added FUTURE/CLOUD ones are never looked for; n1..n7 are
    assert unlisted_added(old, new, {"a": _node("a", "IDLE"), "n1": _node("n1", "IDLE")}) == [
        f"n{i}" for i in range(2, 8)
    ]
