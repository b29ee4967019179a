"""GPU domains as Slurm features, in place on dynamic nodes: the Node's NVLink clique label and the
ComputeDomains its Node joined (served by the fake at the real custom-objects path) become
`nvlink-clique-<v>` / `nvlink-domain-<name>`; a job constrained to one runs there; a change moves
the feature; an admin's (and the NodeSet's) features are never removed; a malformed value never
reaches Slurm; nothing is written while nothing changes."""

from __future__ import annotations

import pytest

from sidecars.devcluster import DevCluster
from sidecars.kube.gpudomain import CLIQUE_LABEL
from tests.controlplane.conftest import control_plane
from tests.controlplane.reconcile.test_cordon_sync import settled
from tests.fakekube import FakeKube
from tests.helpers import eventually

CLIQUE = "nvlink-clique-1d5e8a48-2c1b-4b0e-9f3c-3a1f7e9b0c11.7"


async def features(cluster: DevCluster) -> dict[str, set[str]]:
    return {n.name: set(n.features) for n in await cluster.client().nodes()}


@pytest.mark.releases("slurm24")  # dynamic nodes (slurmd -Z) updated in place; 22.05-26.05 take it alike
@pytest.mark.cluster(shape="slinky", nodes=4, features={"n1": "admin-ib"})
async def test_domains_become_features_and_move_without_touching_anyone_elses(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.serve_crds = True
    clique = CLIQUE.removeprefix("nvlink-clique-")
    fake.add_node("k1", labels={CLIQUE_LABEL: clique})
    fake.add_node("k2", labels={CLIQUE_LABEL: clique})
    fake.add_node("k3", labels={CLIQUE_LABEL: "bad value|x"})  # malformed: nothing may reach Slurm
    fake.add_node("k4", labels={CLIQUE_LABEL: ""})  # empty: no bare `nvlink-clique-` either
    for i in (1, 2, 3, 4):
        fake.add_pod(f"w{i}", hostname=f"n{i}", node_name=f"k{i}")
    fake.set_compute_domain("train-a", ["k1"])
    async with control_plane(cluster, url, gpu={"compute_domains": True}) as cp:
        await eventually(lambda: cp.leading("gpu_features"), what="leader with Nodes and ComputeDomains")
        found = await eventually(
            lambda: features(cluster),
            lambda f: "nvlink-domain-train-a" in f["n1"] and CLIQUE in f["n2"],
            what="domain features",
        )
        assert found == {
            "n1": {"slinky", "admin-ib", CLIQUE, "nvlink-domain-train-a"},
            "n2": {"slinky", CLIQUE},
            "n3": {"slinky"},
            "n4": {"slinky"},
        }
        nodes = {n.name: n for n in await cluster.client().nodes()}
        assert set(nodes["n1"].active_features) == found["n1"]  # usable by --constraint at once
        job = await cluster.sbatch("-t", "1", "--constraint=nvlink-domain-train-a", wrap="true")
        done = await cluster.wait_job(job, {"COMPLETED", "FAILED"}, timeout=60)
        assert (done.state, done.nodes) == ("COMPLETED", ("n1",))

        # steady state: no write while nothing changes
        writes = cp.plane.writers["gpu_features"].writes
        await settled(cp)
        assert cp.plane.writers["gpu_features"].writes == writes == 2

        # an admin adds a feature of their own; the domain moves to k2; k2 loses its clique label
        await cluster.client().update_nodes(
            ["n1"], AvailableFeatures=",".join([*nodes["n1"].features, "admin-new"])
        )
        fake.set_compute_domain("train-a", ["k2"])
        fake.label_node("k2", {CLIQUE_LABEL: None})
        found = await eventually(
            lambda: features(cluster),
            lambda f: "nvlink-domain-train-a" in f["n2"] and "nvlink-domain-train-a" not in f["n1"],
            what="the domain moved",
        )
        await settled(cp)
        assert await features(cluster) == {
            "n1": {"slinky", "admin-ib", "admin-new", CLIQUE},
            "n2": {"slinky", "nvlink-domain-train-a"},
            "n3": {"slinky"},
            "n4": {"slinky"},
        }
        # the ComputeDomain gone: its feature goes; the rest stays
        fake.delete_compute_domain("train-a")
        await eventually(
            lambda: features(cluster), lambda f: f["n2"] == {"slinky"}, what="the domain feature removed"
        )
        await settled(cp)  # the pass that wrote it counts its writes once it ends, after Slurm shows them
        assert cp.plane.writers["gpu_features"].writes == 5
