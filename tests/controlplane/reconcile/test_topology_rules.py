"""Topology from Node labels, the rules: places, refusals, and the rendered files (which a real
slurmctld loads: topology.yaml on 26.05, topology.conf with topology/tree on 22.05 and 24.11)."""

from __future__ import annotations

import pytest

from sidecars.controlplane.reconcile.topology_files import group, render_conf, render_yaml
from sidecars.devcluster import ClusterSpec, DevCluster, Release
from sidecars.kube.topology import Placement, TopologySpec, parse_keys, placement
from tests.slurm.topology import switches

ZONE, RACK = "topology.kubernetes.io/zone", "example.com/rack"
TREE = TopologySpec((ZONE, RACK), "tree", "kube")
BLOCK = TopologySpec((ZONE, RACK), "block", "kube")


def test_places_from_labels_tree_and_block() -> None:
    labels = {ZONE: "zone-a", RACK: "r1", "other": "x"}
    assert placement(TREE, labels) == Placement(("kube", "zone-a", "zone-a/r1"))
    assert placement(TREE, labels).in_place(TREE) == "kube:kube:zone-a:zone-a/r1"  # type: ignore[union-attr]
    assert placement(BLOCK, labels) == Placement(("zone-a/r1",))
    assert placement(BLOCK, labels).in_place(BLOCK) == "kube:zone-a/r1"  # type: ignore[union-attr]
    # two racks of one name in two zones are two switches
    assert placement(TREE, {ZONE: "b", RACK: "r1"}) != placement(TREE, {ZONE: "a", RACK: "r1"})
    assert placement(TREE, {ZONE: "1", RACK: "true"}) == Placement(("kube", "1", "1/true"))


@pytest.mark.parametrize(
    ("labels", "why"),
    [
        ({RACK: "r1"}, f"label {ZONE} is missing"),
        ({ZONE: "", RACK: "r1"}, f"label {ZONE} is empty"),
        ({ZONE: "  ", RACK: "r1"}, f"label {ZONE} is empty"),
        ({ZONE: "a", RACK: "r 1"}, "is not a value Slurm can take"),
        ({ZONE: "a", RACK: "r:1"}, "is not a value Slurm can take"),
        ({ZONE: "a", RACK: "r,1"}, "is not a value Slurm can take"),
        ({ZONE: "a", RACK: "r=1"}, "is not a value Slurm can take"),
        ({ZONE: "a", RACK: "-r1"}, "is not a value Slurm can take"),
        ({ZONE: "a" * 40, RACK: "b" * 30}, "longer than Slurm's 64 characters"),
    ],
)
def test_a_bad_value_is_refused_with_a_reason(labels: dict[str, str], why: str) -> None:
    got = placement(TREE, labels)
    assert isinstance(got, str) and why in got


def test_label_keys_are_checked() -> None:
    assert parse_keys(f" {ZONE}, {RACK} ,") == (ZONE, RACK)
    assert parse_keys("") == ()
    for bad in ("a b", "x/", "k=v", f"{ZONE},{ZONE}"):
        with pytest.raises(ValueError):
            parse_keys(bad)


def test_one_call_per_distinct_place() -> None:
    assert group([("n2", "t:a"), ("n1", "t:a"), ("n3", "t:b")]) == {"t:a": ["n1", "n2"], "t:b": ["n3"]}


PLACES = {
    "n1": Placement(("kube", "a", "a/r1")),
    "n2": Placement(("kube", "a", "a/r1")),
    "n3": Placement(("kube", "b", "b/r1")),
}


def test_rendered_tree_yaml_and_conf() -> None:
    assert render_yaml(TREE, PLACES) == (
        "---\n"
        '- topology: "kube"\n'
        "  cluster_default: true\n"
        "  tree:\n"
        "    switches:\n"
        '      - switch: "kube"\n'
        '        children: "a,b"\n'
        '      - switch: "a"\n'
        '        children: "a/r1"\n'
        '      - switch: "a/r1"\n'
        '        nodes: "n[1-2]"\n'
        '      - switch: "b"\n'
        '        children: "b/r1"\n'
        '      - switch: "b/r1"\n'
        '        nodes: "n3"\n'
    )
    conf = render_conf(TREE, PLACES).splitlines()
    assert conf[1:] == [
        "SwitchName=kube Switches=a,b",
        "SwitchName=a Switches=a/r1",
        "SwitchName=a/r1 Nodes=n[1-2]",
        "SwitchName=b Switches=b/r1",
        "SwitchName=b/r1 Nodes=n3",
    ]
    assert conf[0].startswith("#")


@pytest.mark.releases("slurm26")
async def test_slurmctld_loads_the_rendered_topology_yaml(release: Release) -> None:
    spec = ClusterSpec(nodes=3, files={"topology.yaml": render_yaml(TREE, PLACES)})
    async with DevCluster(release, spec) as cluster:
        got = await switches(cluster.client())
    assert got == {"kube": "n[1-3]", "a": "n[1-2]", "a/r1": "n[1-2]", "b": "n3", "b/r1": "n3"}


@pytest.mark.releases("slurm22", "slurm24")
async def test_slurmctld_loads_the_rendered_topology_conf(release: Release) -> None:
    spec = ClusterSpec(
        nodes=3, extra_conf="TopologyPlugin=topology/tree", files={"topology.conf": render_conf(TREE, PLACES)}
    )
    async with DevCluster(release, spec) as cluster:
        got = await switches(cluster.client())
    assert got == {"kube": "n[1-3]", "a": "n[1-2]", "a/r1": "n[1-2]", "b": "n3", "b/r1": "n3"}


@pytest.mark.releases("slurm26")
async def test_slurmctld_loads_the_rendered_block_yaml(release: Release) -> None:
    spec = ClusterSpec(nodes=4, files={"topology.yaml": render_yaml(BLOCK, {**PLACES, "n4": PLACES["n3"]})})
    async with DevCluster(release, spec) as cluster:
        out = (await cluster.client().run("scontrol", "show", "topology")).stdout
    blocks = {}
    for line in out.splitlines():
        words = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if "BlockName" in words:  # not the AggregatedBlock lines Slurm adds above them
            blocks[words["BlockName"]] = words["Nodes"]
    assert blocks == {"a/r1": "n[1-2]", "b/r1": "n[3-4]"}
