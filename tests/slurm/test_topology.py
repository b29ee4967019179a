"""`set_topology`: a node moved in place in the loaded topology (25.05+), read back from the node
record; refused by older releases; an empty unit never sent (Slurm would take it, and silently
take the node out of the topology)."""

from __future__ import annotations

import pytest

from sidecars.devcluster import DevCluster
from sidecars.slurm import SlurmCommandError
from tests.slurm.topology import switches

ROOT_ONLY = """---
- topology: kube
  cluster_default: true
  tree:
    switches:
      - switch: kube
"""


@pytest.mark.releases("slurm26")
@pytest.mark.cluster(nodes=3, files={"topology.yaml": ROOT_ONLY})
async def test_set_topology_moves_nodes_in_place_and_the_record_shows_it(cluster: DevCluster) -> None:
    client = cluster.client()
    assert await switches(client) == {"kube": ""}
    await client.set_topology(["n1", "n2"], "kube:kube:a:a/r1")
    await client.set_topology(["n3"], "kube:kube:a:a/r2")
    assert await switches(client) == {"kube": "n[1-3]", "a": "n[1-3]", "a/r1": "n[1-2]", "a/r2": "n3"}
    by_name = {n.name: n for n in await client.nodes()}  # JSON on 26.05
    assert by_name["n1"].topology == "kube:kube:a:a/r1" and by_name["n3"].topology == "kube:kube:a:a/r2"
    one = await client.node("n3")  # text
    assert one is not None and one.topology == "kube:kube:a:a/r2"

    await client.set_topology(["n3"], "kube:kube:a:a/r1")  # moved: off its old leaf
    assert (await switches(client))["a/r1"] == "n[1-3]" and (await switches(client))["a/r2"] == ""

    # a topology the loaded file does not define is Slurm's to refuse
    with pytest.raises(SlurmCommandError, match="not available"):
        await client.set_topology(["n1"], "other:x")
    # an empty unit or level is ours to refuse: it never reaches Slurm, and n1 stays on its leaf
    for bad in ("kube:", "kube", ":a", "kube:kube::a/r1", ""):
        with pytest.raises(ValueError, match="not a topology placement"):
            await client.set_topology(["n1"], bad)
    assert (await switches(client))["a/r1"] == "n[1-3]"

    # a restarted slurmctld forgets in-place moves: the record says so (the sync moves them again)
    await cluster.restart_slurmctld()
    one = await client.node("n1")
    assert one is not None and one.topology == ""
    assert await switches(client) == {"kube": ""}


@pytest.mark.releases("slurm22", "slurm24")
@pytest.mark.cluster(nodes=1)
@pytest.mark.per_release("22.05 and 24.11 refuse it in their own words")
async def test_set_topology_is_refused_before_25_05(cluster: DevCluster) -> None:
    client = cluster.client()
    with pytest.raises(SlurmCommandError, match="not supported"):
        await client.set_topology(["n1"], "kube:kube:a")
    node = await client.node("n1")
    assert node is not None and node.topology == ""
