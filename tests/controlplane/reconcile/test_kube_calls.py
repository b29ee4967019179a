"""Kubernetes calls stay O(changes): once the fleet is settled, the control plane's intervals cost the
API server nothing but the Lease's renewals, and a cordon of N Nodes costs one write per pod that
changed, however many intervals the cordon holds (bench/kube_calls.py shows it at 1,000 workers)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from sidecars.controlplane.reconcile.deletion_cost import ANNOTATION as COST
from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import control_plane
from tests.controlplane.reconcile.settle import settled
from tests.fakekube import FakeKube
from tests.helpers import eventually

# what Kubernetes is asked does not depend on the Slurm release: the host's one shows it
pytestmark = [pytest.mark.cluster(nodes=4), pytest.mark.releases("slurm22")]
CORDON = "slurm-sidecars: kubernetes node {} cordoned"


async def intervals(cp: Any, n: int) -> None:
    """`n` more refresh + act cycles (and with them as many maintenance and upgrade cycles), the
    writers' rounds included: a loaded machine's slow round can lag the refreshes."""
    await settled(cp, n)


def settled_pod(fake: FakeKube, pod: str) -> bool:
    obj = fake.pods[("slurm", pod)]
    types = {c["type"] for c in obj["status"]["conditions"]}
    return "SlurmNodeReady" in types and COST in obj["metadata"]["annotations"]


def drained_condition(fake: FakeKube, pod: str) -> bool:
    conds = {c["type"]: c["status"] for c in fake.pods[("slurm", pod)]["status"]["conditions"]}
    return conds.get("SlurmNodeDrained") == "True"


def beyond_the_lease(fake: FakeKube, since: int) -> Counter[tuple[str, str]]:
    """The calls from request number `since` on, but the Lease's (its renewals are a fixed cost,
    one update per renew interval whatever the fleet) and the watches still open from before."""
    return Counter({k: n for k, n in fake.calls(since).items() if k[1] != "leases"})


async def test_steady_intervals_cost_nothing_and_a_cordon_costs_one_write_per_changed_pod(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    pods = [f"w{i}" for i in range(1, 5)]
    for i, pod in enumerate(pods, 1):
        fake.add_node(f"k{i}")
        fake.add_pod(pod, hostname=f"n{i}", node_name=f"k{i}")
    async with control_plane(cluster, url, conditions={"settle_seconds": 0.3}) as cp:
        await eventually(
            lambda: _all(fake, pods, settled_pod), bool, what="conditions and costs on every pod"
        )
        await intervals(cp, 3)  # the first settle is over: whatever was due is written
        assert fake.calls()[("patch", "pods")] == len(pods)  # the deletion costs (idle: 0), once per pod

        mark = len(fake.requests)
        await intervals(cp, 10)
        steady = beyond_the_lease(fake, mark)
        # nothing written, nothing read: the pods and Nodes come from the watches opened at the
        # start (a watch reopens only at its timeout, 300 s), the upgrade plan was read once
        assert steady == Counter(), steady
        assert [r for r in fake.mutating(mark) if r.resource != "leases"] == []
        renewals = fake.calls(mark)[("update", "leases")]
        assert renewals >= 1 and fake.calls(mark)[("get", "leases")] == 0  # one call per renewal
        # and asking the leader how the upgrade stands (a polled `upgrade status`) reads nothing
        mark = len(fake.requests)
        for _ in range(5):
            status, _body = await cp.get("/v1/upgrade")
            assert status == 200
        assert beyond_the_lease(fake, mark) == Counter()

        # a cordon of N Nodes: each worker drained once (Slurm), each pod's conditions written once
        cordoned = ["k1", "k2"]
        mark = len(fake.requests)
        for name in cordoned:
            fake.set_node_spec(name, unschedulable=True)
        await cluster.wait_nodes(
            lambda ns: {n.name for n in ns if n.state.drain} == {"n1", "n2"}, what="n1, n2 drained"
        )
        await eventually(
            lambda: _all(fake, ["w1", "w2"], drained_condition), bool, what="SlurmNodeDrained on w1, w2"
        )
        await intervals(cp, 3)
        during = beyond_the_lease(fake, mark)
        written = Counter(r.path.split("/")[6] for r in fake.mutating(mark) if r.resource == "pods/status")
        assert written == {"w1": 1, "w2": 1}, written
        # idle before and after: no deletion cost moved; no Event (nothing was re-applied)
        assert during == {("patch", "pods/status"): len(cordoned)}, during

        # held for many intervals more: not one call more (O(N), not O(N x intervals))
        mark = len(fake.requests)
        await intervals(cp, 10)
        assert beyond_the_lease(fake, mark) == Counter()
        nodes = await cluster.client().nodes()
        assert {n.name: n.reason.text for n in nodes if n.state.drain and n.reason} == {
            "n1": CORDON.format("k1"),
            "n2": CORDON.format("k2"),
        }


async def _all(fake: FakeKube, pods: list[str], check: Any) -> bool:
    return all(check(fake, p) for p in pods)
