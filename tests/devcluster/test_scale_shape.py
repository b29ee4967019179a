"""The scale shape: a few real nodes beside many node records that have no slurmd, and a queue of
thousands of held jobs, as the clusters our users run (1,000 nodes, 10,000 jobs) have them."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.devcluster import ClusterSpec, DevCluster, Release
from sidecars.devcluster.slurmconf import Ports, render
from sidecars.slurm import hostlist
from tests.helpers import eventually

PORTS = Ports(6817, 6818, {"n1": 7001, "n2": 7002, "n3": 7003})


def _conf(spec: ClusterSpec) -> list[str]:
    return render(spec, Path("/tmp/dc"), PORTS, "h1", "c1")["slurm.conf"].splitlines()


def test_records_are_numbered_across_states_in_a_partition_of_their_own() -> None:
    spec = ClusterSpec(node_records={"DOWN": 1000, "FUTURE": 20, "CLOUD": 5}, max_job_count=20000)
    lines = _conf(spec)
    records = [line for line in lines if line.startswith("NodeName=x")]
    common = "NodeAddr=255.255.255.255 CPUs=64 RealMemory=512000"
    assert records == [
        f"NodeName=x[0001-1000] {common} State=DOWN Reason=not_provisioned",
        f"NodeName=x[1001-1020] {common} State=FUTURE",
        f"NodeName=x[1021-1025] {common} State=CLOUD",
    ]
    assert "MaxJobCount=20000" in lines
    # the default partition holds only the nodes with a slurmd: no test job waits on a record
    assert "PartitionName=debug Nodes=n1,n2,n3 Default=YES MaxTime=INFINITE State=UP" in lines
    assert "PartitionName=records Nodes=x[0001-1025] Default=NO State=UP" in lines
    assert len(spec.record_names()) == 1025
    assert hostlist.expand("x[0001-1025]") == spec.record_names()


def test_slinky_node_table_has_room_for_records_and_workers() -> None:
    spec = ClusterSpec(shape="slinky", node_records={"DOWN": 100})
    assert "MaxNodeCount=111" in _conf(spec)  # 3 workers + 8 to spare + 100 records


def test_no_records_no_change() -> None:
    lines = _conf(ClusterSpec())
    assert "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" in lines
    assert not [
        line for line in lines if line.startswith(("NodeName=x", "MaxJobCount", "PartitionName=records"))
    ]


@pytest.mark.parametrize("records", [{"IDLE": 3}, {"DOWN": -1}])
def test_bad_records_are_refused(records: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="node record"):
        ClusterSpec(node_records=records)
    with pytest.raises(ValueError, match="node record reach 'answering'"):
        ClusterSpec(node_records={"DOWN": 1}, record_reach="answering")


# slurmctld's own account of each connection it makes (DebugFlags=Network, logged at "verbose"), and
# of what it waits for
NET_CONF = "DebugFlags=Network\nSlurmctldDebug=verbose"
NET_LINES = ("Failed to connect to", "retrying", "agent_fini")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "retried",
    [
        pytest.param(False, marks=pytest.mark.cluster(node_records={"DOWN": 50}, extra_conf=NET_CONF)),
        # the control: the same records on a loopback port nobody listens on
        pytest.param(
            True,
            marks=pytest.mark.cluster(node_records={"DOWN": 50}, record_reach="refused", extra_conf=NET_CONF),
        ),
    ],
    ids=["unreachable", "refused"],
)
@pytest.mark.per_release("each release's slurmctld retries (or not) a record that never registered")
async def test_slurmctld_gives_up_on_a_record_at_once(cluster: DevCluster, retried: bool) -> None:
    """slurmctld messages every record that never registered at each ping round. By default a
    record's connection fails in a way Slurm does not retry, so no message to it holds an agent
    thread, as none does when a slurmd answers; and a reconfigure on 24.11+ (a re-exec) has no agent
    thread to wait for. A refused one is retried once a second for 10 s, and that reconfigure waits."""
    log = cluster.log_dir / "slurmctld.log"

    def net() -> list[str]:
        return [line for line in log.read_text().splitlines() if any(w in line for w in NET_LINES)]

    # the first ping round: one line per connection Slurm tried and gave up on or retries
    seen = await eventually(
        net,
        lambda lines: any(w in ln for ln in lines for w in NET_LINES[:2]),
        within=60,
        what="a record messaged",
    )
    assert any("retrying" in line for line in seen) == retried, seen[:5]
    if cluster.release.short == "22.05":
        return  # it reconfigures in place: nothing waits for the agent threads
    await cluster.client(timeout=30.0).reconfigure()
    await eventually(lambda: cluster.client().ping(), lambda p: p.up, within=30, what="slurmctld back")
    waited = [line for line in net() if "agent_fini" in line]
    assert bool(waited) == retried, waited


@pytest.mark.timeout(300)
@pytest.mark.per_release("each release's slurmctld starting on 1,000 records and a held queue")
async def test_a_cluster_with_records_and_a_held_queue(release: Release) -> None:
    """start() waits for the nodes with a slurmd only; the held jobs are individual pending jobs;
    a job still runs on a real node."""
    spec = ClusterSpec(node_records={"DOWN": 200, "FUTURE": 10, "CLOUD": 10, "DRAIN": 5}, max_job_count=2000)
    async with DevCluster(release, spec) as c:
        listed = {n.name: n for n in await c.client().nodes()}
        assert {"n1", "n2", "n3"} <= listed.keys()
        assert all(listed[n].state.base == "IDLE" for n in ("n1", "n2", "n3"))
        down = [n for n in listed if n.startswith("x")]
        assert set(spec.record_names()[:200]) <= set(down)  # FUTURE (and on 22.05 CLOUD) are not listed
        assert listed["x0001"].state.base == "DOWN"
        # the text listing (what the verification reads at each change) has the same nodes in the
        # same states, and the FUTURE records too
        text = {n.name: n for n in await c.client().node_listing()}
        assert set(listed) <= set(text) and {n for n in text if n not in listed} <= set(spec.record_names())
        assert any(text[n].state.base == "FUTURE" for n in spec.record_names()[200:210])
        for name, node in listed.items():
            assert (text[name].state.base, text[name].features) == (node.state.base, node.features), name
        assert all(text[n].slurmd_start_time for n in ("n1", "n2", "n3"))
        ids = await c.submit_held(300, loops=4)
        assert len(set(ids)) == 300
        summaries = {j.job_id: j for j in await c.client().job_summaries()}
        assert all(summaries[i].state == "PENDING" for i in ids)
        held = await c.client().job(ids[-1])
        assert held is not None and held.state == "PENDING" and "Held" in held.state_reason
        job = await c.sbatch("-N", "1", wrap="true")
        done = await c.wait_job(job, "COMPLETED", timeout=60)
        assert done.nodes[0] in ("n1", "n2", "n3")
        assert await c.client().job(10**9 - 1) is None
