"""Health signals on real Slurm and the fake API server: a configured Node condition or taint drains
the Slurm nodes of the workers on that Node with our reason naming the signal, clearing it undrains
them, an admin's drain survives the signal clearing, and each signal shows in /status, in Events and
in metrics. Beside Slinky's operator (reproduced in slinky_operator.py): a cordon is drained once (by
the operator), a health drain of ours survives the operator's uncordon sweep, and our pod conditions
stay off its pods."""

from __future__ import annotations

from typing import Any

import pytest

from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import VIEWER, control_plane
from tests.controlplane.reconcile.settle import drains, settled
from tests.controlplane.reconcile.slinky_operator import PREFIX, SlinkyOperator
from tests.fakekube import FakeKube
from tests.helpers import eventually

# the rules are ours; the drain batcher's writes are tested per release in test_drains.py
pytestmark = [pytest.mark.cluster(nodes=4), pytest.mark.releases("slurm26")]
QUARANTINE = "nvsentinel.dgxc.nvidia.com/quarantine"  # a taint key of the kind NVSentinel sets
K1 = "slurm-sidecars: health KernelDeadlock on kubernetes node k1"
K2 = "slurm-sidecars: health KernelDeadlock on kubernetes node k2"
SLINKY = "slinky.slurm.net/v1beta1"


def two_hosts(fake: FakeKube, owner: str = "ReplicaSet", api: str = "apps/v1") -> None:
    """Workers w1, w2 (Slurm n1, n2) on Kubernetes node k1; w3, w4 (n3, n4) on k2."""
    fake.add_node("k1")
    fake.add_node("k2")
    for i in range(1, 5):
        fake.add_pod(
            f"w{i}",
            hostname=f"n{i}",
            node_name="k1" if i <= 2 else "k2",
            owner_kind=owner,
            owner_api_version=api,
        )


def deadlock(fake: FakeKube, node: str, on: bool) -> None:
    """node-problem-detector's kernel monitor: KernelDeadlock True (DockerHung), then False."""
    if on:
        fake.set_node_condition(
            node, "KernelDeadlock", "True", "DockerHung", "task docker:7 blocked for more than 120 seconds."
        )
    else:
        fake.set_node_condition(
            node, "KernelDeadlock", "False", "KernelHasNoDeadlock", "kernel has no deadlock"
        )


def events(fake: FakeKube, reason: str) -> list[dict[str, Any]]:
    return [e for e in fake.events if e["reason"] == reason]


async def test_a_node_condition_drains_its_workers_clearing_undrains_and_an_admins_drain_stays(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    two_hosts(fake)
    client = cluster.client()
    await client.drain(["n3"], "admin: bad DIMM")  # someone else's drain on a worker about to be sick
    health = {"conditions": (("KernelDeadlock", ""),), "settle_seconds": 0.0, "max_fraction": 1.0}
    async with control_plane(cluster, url, health=health) as cp:
        await eventually(lambda: cp.leading("health"), what="leader with pods and nodes")
        deadlock(fake, "k2", False)  # reported healthy: nothing happens
        deadlock(fake, "k1", True)
        nodes = await cluster.wait_nodes(lambda ns: {"n1", "n2"} <= drains(ns).keys(), what="n1, n2 drained")
        assert drains(nodes) == {"n1": K1, "n2": K1, "n3": "admin: bad DIMM"}
        (event, *_) = await eventually(lambda: events(fake, "SlurmHealthDrain"), lambda es: len(es) == 2)
        assert event["type"] == "Warning" and "KernelDeadlock" in event["message"]
        assert "DockerHung" in event["message"] and event["involvedObject"]["name"] in {"w1", "w2"}

        deadlock(fake, "k2", True)
        nodes = await cluster.wait_nodes(lambda ns: "n4" in drains(ns), what="n4 drained")
        assert drains(nodes) == {"n1": K1, "n2": K1, "n3": "admin: bad DIMM", "n4": K2}
        # the batcher can write n4's drain before the round that asked for it has told its Event and
        # counted its states
        await settled(cp)
        status, body = await cp.get("/status")
        assert status == 200
        health = body["health"]
        assert health["signals"] == ["KernelDeadlock"]
        states = {name: n["state"] for name, n in health["nodes"].items()}
        assert states == {"n1": "drained", "n2": "drained", "n3": "other_drain", "n4": "drained"}
        assert health["nodes"]["n3"]["signals"][0]["name"] == "KernelDeadlock"
        _, page = await cp.get("/ui/api/state", headers={"Authorization": f"Bearer {VIEWER}"})
        assert page["cluster"]["health"]["nodes"]["n1"]["state"] == "drained"  # the page's banner shows it
        assert cp.sample("slurm_sidecars_health_signals", signal="KernelDeadlock") == 4
        assert cp.sample("slurm_sidecars_health_nodes", state="other_drain") == 1
        assert cp.sample("slurm_sidecars_health_actions_total", action="drain") == 3

        # the signal clears everywhere: ours are undone, the admin's stays
        deadlock(fake, "k1", False)
        fake.set_node_condition("k2", "KernelDeadlock", None)
        await cluster.wait_nodes(lambda ns: drains(ns).keys() == {"n3"}, what="n1, n2, n4 undrained")
        await settled(cp)
        assert drains(await client.nodes()) == {"n3": "admin: bad DIMM"}
        assert len(events(fake, "SlurmHealthUndrain")) == 3
        assert cp.sample("slurm_sidecars_health_signals", signal="KernelDeadlock") == 0
        _, body = await cp.get("/status")
        assert body["health"]["nodes"] == {}


@pytest.mark.releases("slurm22")  # the cap is ours, not Slurm's: one release shows it
async def test_a_taint_on_every_node_drains_no_more_than_the_cap(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    two_hosts(fake)
    taint = [{"key": QUARANTINE, "value": "true", "effect": "NoSchedule"}]
    async with control_plane(
        cluster, url, health={"taints": ((QUARANTINE, ""),), "settle_seconds": 0.0, "max_fraction": 0.25}
    ) as cp:
        await eventually(lambda: cp.leading("health"), what="leader with pods and nodes")
        fake.set_node_spec("k1", taints=taint)
        fake.set_node_spec("k2", taints=taint)  # a fleet-wide signal: 4 workers, a cap of 1
        await eventually(lambda: events(fake, "SlurmHealthDrainCapped"), lambda es: len(es) == 3)
        await settled(cp)
        (drained,) = drains(await cluster.client().nodes()).items()
        assert drained[1] is not None and drained[1].startswith(f"slurm-sidecars: health {QUARANTINE} on")
        assert cp.sample("slurm_sidecars_health_nodes", state="capped") == 3
        # the cause goes away: the one drained returns, none of the others is drained on the way
        fake.set_node_spec("k1", taints=[])
        fake.set_node_spec("k2", taints=[])
        await cluster.wait_nodes(lambda ns: not drains(ns), what="undrained")
        await settled(cp)
        assert not drains(await cluster.client().nodes())
        assert cp.sample("slurm_sidecars_health_actions_total", action="drain") == 1


@pytest.mark.cluster(nodes=5)
async def test_beside_slinky_one_drain_per_cordon_ours_survive_its_sweep_and_conditions_stay_off(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    two_hosts(fake, owner="NodeSet", api=SLINKY)
    fake.add_node("k3")
    fake.add_pod("w5", hostname="n5", node_name="k3")  # a ReplicaSet worker beside them: ours as before
    client = cluster.client()
    await client.drain(["n4"], "admin: reseat GPU")
    operator = SlinkyOperator(fake, client, sweep=True)  # DaemonSet mode: it lifts cordons every pass
    health = {"conditions": (("KernelDeadlock", ""),), "settle_seconds": 0.0, "max_fraction": 1.0}
    async with (
        operator.running(),
        control_plane(cluster, url, health=health, conditions={"settle_seconds": 0.0}) as cp,
    ):
        await eventually(lambda: cp.leading("health", "cordons"), what="leader with pods and nodes")
        # a cordon: the operator drains k1's workers with its reason; our cordon sync leaves them
        fake.set_node_spec("k1", unschedulable=True)
        nodes = await cluster.wait_nodes(lambda ns: {"n1", "n2"} <= drains(ns).keys(), what="n1, n2 drained")
        assert drains(nodes)["n1"] == f"{PREFIX}Node (k1) was cordoned, Pod (slurm/w1) must be cordoned"
        await settled(cp)
        reasons = drains(await client.nodes()).values()
        assert all(r is None or not r.startswith("slurm-sidecars:") for r in reasons)
        assert cp.sample("slurm_sidecars_drain_requests_total", action="drain", result="queued") == 0
        fake.set_node_spec("k1", unschedulable=False)
        await cluster.wait_nodes(
            lambda ns: not {"n1", "n2"} & drains(ns).keys(), what="the operator undrained"
        )

        # a health signal on k2: our reason, which the operator's sweep leaves; n4 stays the admin's
        deadlock(fake, "k2", True)
        nodes = await cluster.wait_nodes(lambda ns: "n3" in drains(ns), what="n3 drained")
        assert drains(nodes) == {"n3": K2, "n4": "admin: reseat GPU"}
        passes = operator.passes
        await eventually(lambda: operator.passes, lambda n: n >= passes + 3, what="3 operator passes")
        assert drains(await client.nodes()) == {"n3": K2, "n4": "admin: reseat GPU"}
        # told after the drain is queued, and the batch may write it first: waited for, not read
        await eventually(
            lambda: [e["involvedObject"]["name"] for e in events(fake, "SlurmHealthDrain")],
            lambda told: told == ["w3"],
            what="the drain of n3 told on w3 alone",
        )
        deadlock(fake, "k2", False)
        await cluster.wait_nodes(lambda ns: "n3" not in drains(ns), what="n3 undrained")
        await settled(cp)
        assert drains(await client.nodes()) == {"n4": "admin: reseat GPU"}
        assert "n3" not in operator.undrains and "n4" not in operator.undrains  # ours and the admin's

        # conditions: the operator's on its pods, untouched by us; ours only on the ReplicaSet worker
        await eventually(
            lambda: _types(fake, "w5"), lambda ts: "SlurmNodeReady" in ts, what="our conditions on w5"
        )
        for pod in ("w1", "w2", "w3", "w4"):
            types = _types(fake, pod)
            assert not {"SlurmNodeReady", "SlurmNodeDrained", "SlurmNodeDown"} & types, pod
            assert any(t.startswith("SlurmNodeState") for t in types), pod
        status_writes = [r for r in fake.mutating() if r.path.endswith("/status")]
        assert status_writes and all("/pods/w5/" in r.path for r in status_writes)


def _types(fake: FakeKube, pod: str) -> set[str]:
    return {c["type"] for c in fake.pods[("slurm", pod)]["status"].get("conditions") or []}
