"""DaemonSet-style workers (`--node-name-from=kube-node`): a worker pod's Slurm node is its
Kubernetes Node's name, or the Node's override annotation; a pod recreated on the same Node keeps
the name; a second pod claiming a Slurm node is refused (not ranked, drained or recycled for it),
with an Event and a log line naming both pods."""

from __future__ import annotations

import pytest

from sidecars.devcluster import DevCluster
from sidecars.kube.nodename import ANNOTATION
from tests.controlplane.conftest import control_plane
from tests.controlplane.reconcile.test_cordon_sync import drains, settled
from tests.fakekube import FakeKube
from tests.helpers import eventually

# the rules are ours, not Slurm's: one release shows them
pytestmark = [pytest.mark.cluster(nodes=3), pytest.mark.releases("slurm22")]
COST = "controller.kubernetes.io/pod-deletion-cost"
EARLY, LATE = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def costs(fake: FakeKube) -> dict[str, str]:
    return {
        name: pod["metadata"]["annotations"][COST]
        for (_, name), pod in fake.pods.items()
        if COST in pod["metadata"]["annotations"]
    }


def refusals(fake: FakeKube) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for e in fake.events:
        if e["reason"] == "SlurmNodeClaimRefused":
            out.setdefault(e["involvedObject"]["name"], []).append(e["message"])
    return out


async def test_kube_node_names_and_conflicting_claims(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_node("n1")
    fake.add_node("n2")
    fake.add_node("k3", annotations={ANNOTATION: "n3"})  # the override: Slurm node n3
    fake.add_node("k9", annotations={ANNOTATION: "n1"})  # an admin's mistake: n1 once more
    fake.add_node("kbad", annotations={ANNOTATION: "two words"})
    # pod names and host names say nothing: DaemonSet pods are named ds-<random>
    fake.add_pod("ds-a", node_name="n1", created=EARLY)
    fake.add_pod("ds-b", node_name="n2", created=EARLY)
    fake.add_pod("ds-c", node_name="k3", created=EARLY)
    fake.add_pod("ds-d", node_name="k9", created=LATE)  # claims n1, which ds-a holds
    fake.add_pod("ds-e", node_name="n2", created=LATE)  # a surge pod beside ds-b on n2
    fake.add_pod("ds-f", node_name="kbad", created=EARLY)
    async with control_plane(cluster, url, node_name_from="kube-node") as cp:
        await eventually(cp.leading, what="leader with pods and Nodes")
        await eventually(lambda: costs(fake), lambda c: c.keys() == {"ds-a", "ds-b", "ds-c"}, what="costs")
        found = await eventually(
            lambda: refusals(fake), lambda r: r.keys() == {"ds-d", "ds-e", "ds-f"}, what="three refusals"
        )
        assert "slurm/ds-d claims Slurm node n1, which pod slurm/ds-a holds" in found["ds-d"][0]
        assert "slurm/ds-e claims Slurm node n2, which pod slurm/ds-b holds" in found["ds-e"][0]
        assert "'two words'" in found["ds-f"][0] and "kbad" in found["ds-f"][0]
        event = next(e for e in fake.events if e["involvedObject"]["name"] == "ds-d")
        assert event["type"] == "Warning"
        _, status = await cp.get("/status")
        assert {r["pod"]: r["holder"] for r in status["refused_pods"]} == {
            "slurm/ds-d": "slurm/ds-a",
            "slurm/ds-e": "slurm/ds-b",
            "slurm/ds-f": None,
        }

        # the refused pod's Node cordoned: the Slurm node it claims is not its own, nothing drains
        fake.set_node_spec("k9", unschedulable=True)
        fake.set_node_spec("n2", unschedulable=True)  # the holder's Node: its node drains
        await cluster.wait_nodes(lambda ns: "n2" in drains(ns), what="n2 drained")
        await settled(cp)
        assert drains(await cluster.client().nodes()) == {"n2": "slurm-sidecars: kubernetes node n2 cordoned"}
        # nothing recycled (ds-f has no Slurm node at all, and is Ready), nothing ranked twice,
        # each refusal reported once
        assert {name for _, name in fake.pods} == {"ds-a", "ds-b", "ds-c", "ds-d", "ds-e", "ds-f"}
        assert costs(fake).keys() == {"ds-a", "ds-b", "ds-c"}
        assert {k: len(v) for k, v in refusals(fake).items()} == {"ds-d": 1, "ds-e": 1, "ds-f": 1}

        # ds-b gone: the pod on its Node takes its Slurm node over (same name, another pod)
        fake.remove_pod("slurm", "ds-b")
        await eventually(lambda: costs(fake), lambda c: "ds-e" in c, what="ds-e ranked as n2's pod")
        await eventually(
            lambda: cp.get("/status"),
            lambda r: {x["pod"] for x in r[1]["refused_pods"]} == {"slurm/ds-d", "slurm/ds-f"},
            what="ds-e no longer refused",
        )
        assert (
            cp.plane.workers.node_of(next(p for p in cp.plane.workers.pods.pods.values() if p.name == "ds-e"))
            == "n2"
        )
        fake.set_node_spec("n2", unschedulable=False)
        await cluster.wait_nodes(lambda ns: not drains(ns), what="n2 undrained")


async def test_pod_naming_is_unchanged_by_default(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    """Without --node-name-from=kube-node, the pod's hostname names the node, whatever its Node's
    annotation says, and no pod is refused (the pod naming's behaviour is unchanged)."""
    fake, url = fake_kube
    fake.add_node("k1", annotations={ANNOTATION: "n3"})
    fake.add_pod("w1", hostname="n1", node_name="k1", created=EARLY)
    fake.add_pod("w1-copy", hostname="n1", node_name="k1", created=LATE)
    fake.add_pod("w2", hostname="n2", node_name="k1", created=EARLY)
    async with control_plane(cluster, url) as cp:
        await eventually(cp.leading, what="leader with pods")
        await eventually(lambda: costs(fake), lambda c: c.keys() == {"w1", "w1-copy", "w2"}, what="costs")
        await settled(cp)
        assert not refusals(fake) and cp.plane.workers.claims.refused == {}
        assert {p.name: cp.plane.workers.node_of(p) for p in cp.plane.workers.pods.pods.values()} == {
            "w1": "n1",
            "w1-copy": "n1",
            "w2": "n2",
        }
