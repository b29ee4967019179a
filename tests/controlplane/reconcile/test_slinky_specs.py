"""In Slinky mode, topology and GPU-domain features go out as the operator's Node annotations
(`topology.slinky.slurm.net/spec`, `features.slinky.slurm.net/spec`) for the Nodes of NodeSet pods,
with what others wrote there kept, and our direct Slurm writes stay off for those pods; a ReplicaSet
worker beside them is placed and given features in Slurm as before, and its Node is not annotated."""

from __future__ import annotations

from typing import Any

import pytest

from sidecars.controlplane.reconcile.slinky_specs import FEATURES_SPEC, TOPOLOGY_SPEC
from sidecars.controlplane.reconcile.topology_files import render_yaml
from sidecars.devcluster import DevCluster
from sidecars.kube.gpudomain import CLIQUE_LABEL
from sidecars.kube.topology import TopologySpec
from tests.controlplane.conftest import control_plane
from tests.controlplane.reconcile.test_topology_sync import passes
from tests.fakekube import FakeKube
from tests.helpers import eventually

ZONE, RACK = "topology.kubernetes.io/zone", "example.com/rack"
KEYS = (ZONE, RACK)
EMPTY_TREE = render_yaml(TopologySpec(KEYS, "tree", "kubernetes"), {})
SLINKY = "slinky.slurm.net/v1beta1"
X, Y = "1d5e8a48.7", "77aa01ce.2"


def annotations(fake: FakeKube, node: str) -> dict[str, Any]:
    found: dict[str, Any] = fake.nodes[node]["metadata"]["annotations"]
    return {k: v for k, v in found.items() if k in (TOPOLOGY_SPEC, FEATURES_SPEC)}


@pytest.mark.releases("slurm26")  # the operator's annotations are ours to write; 26.05 shows Slurm untouched
@pytest.mark.cluster(shape="slinky", nodes=3, files={"topology.yaml": EMPTY_TREE})
async def test_slinky_workers_get_node_annotations_and_no_direct_write(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    # someone else's place and feature on k1 (a discovery daemon): kept beside ours
    theirs = {TOPOLOGY_SPEC: "topo-block:b7", FEATURES_SPEC: "switch-17"}
    fake.add_node("k1", annotations=theirs, labels={ZONE: "a", RACK: "r1", CLIQUE_LABEL: X})
    fake.add_node("k2", labels={ZONE: "a", RACK: "r2", CLIQUE_LABEL: Y})
    fake.add_node("k3", labels={ZONE: "a", RACK: "r1", CLIQUE_LABEL: X})
    fake.add_pod("w1", hostname="n1", node_name="k1", owner_kind="NodeSet", owner_api_version=SLINKY)
    fake.add_pod("w2", hostname="n2", node_name="k2", owner_kind="NodeSet", owner_api_version=SLINKY)
    fake.add_pod("w3", hostname="n3", node_name="k3")  # a ReplicaSet worker: written in Slurm as before
    client = cluster.client()
    async with control_plane(
        cluster, url, topology={"spec": TopologySpec(KEYS), "settle_seconds": 0.0}
    ) as cp:
        await eventually(lambda: cp.leading("slinky_specs", "topology"), what="leader with pods and Nodes")
        want = {
            "k1": {
                TOPOLOGY_SPEC: "topo-block:b7,kubernetes:kubernetes:a:a/r1",
                FEATURES_SPEC: f"switch-17,nvlink-clique-{X}",
            },
            "k2": {TOPOLOGY_SPEC: "kubernetes:kubernetes:a:a/r2", FEATURES_SPEC: f"nvlink-clique-{Y}"},
        }
        for node, values in want.items():
            await eventually(lambda n=node: annotations(fake, n), lambda a, v=values: a == v, what=node)
        n3 = await cluster.wait_node("n3", lambda n: f"nvlink-clique-{X}" in n.features, what="n3 direct")
        assert n3.topology == "kubernetes:kubernetes:a:a/r1"
        assert annotations(fake, "k3") == {}

        await passes(cp)
        nodes = {n.name: n for n in await client.nodes()}
        for name in ("n1", "n2"):  # the operator's to set: nothing of ours reached Slurm
            assert set(nodes[name].features) == {"slinky"} and nodes[name].topology == "", name
        writes = cp.plane.writers["slinky_specs"].writes  # type: ignore[attr-defined]
        assert writes == 2

        # k2 joins clique X and rack r1: its annotations follow, in one patch; nothing else is written
        fake.label_node("k2", {RACK: "r1", CLIQUE_LABEL: X})
        moved = {TOPOLOGY_SPEC: "kubernetes:kubernetes:a:a/r1", FEATURES_SPEC: f"nvlink-clique-{X}"}
        await eventually(lambda: annotations(fake, "k2"), lambda a: a == moved, what="k2 moved")
        await passes(cp)
        assert cp.plane.writers["slinky_specs"].writes == writes + 1  # type: ignore[attr-defined]
        assert annotations(fake, "k1") == want["k1"]
