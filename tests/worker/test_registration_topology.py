"""A DaemonSet worker's slurmd registers in its place in the topology (26.05): the agent writes the
place its Kubernetes Node's labels give, by the control plane's rule, and slurmd registers with
`--conf Topology=<that>`; a Node with an empty label gives an empty file, slurmd registers with no
Topology= and stays outside the topology (the control plane's in-place sync places it later).

The Slurm facts that shape the rule, measured here: slurmctld takes `Topology=kubernetes:` (an
empty unit) and registers the node outside every switch without a word (slurm-operator #261);
a topology slurmctld has not loaded, or a switch it cannot place, registers the node drained
(INVALID_REG, "Failed to set topology"); a place given at registration outlives a slurmctld
restart (an in-place move does not); and 24.11's slurmd does not start with Topology= at all.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from sidecars.devcluster import DevCluster
from sidecars.kube import KubeClient
from sidecars.kube.topology import TopologySpec
from sidecars.runtime import process
from sidecars.slurm import Node
from sidecars.worker import naming
from tests.fakekube import FakeKube
from tests.slurm.topology import switches
from tests.worker.agents import settings_for

ZONE, RACK = "topology.kubernetes.io/zone", "example.com/rack"
SPEC = TopologySpec((ZONE, RACK))
ROOT_ONLY = """---
- topology: kubernetes
  cluster_default: true
  tree:
    switches:
      - switch: kubernetes
"""


async def register(cluster: DevCluster, name: str, topology: str) -> Node:
    """Start `name`'s slurmd as the overlay's script does: Topology= only when there is a value."""
    if topology:
        cluster.spec.topology[name] = topology  # type: ignore[index]
    await cluster.start_slurmd(name)
    return await cluster.wait_node(name, lambda n: n.state.registered or "INVALID_REG" in n.state.flags)


@pytest.mark.releases("slurm26")
@pytest.mark.cluster(shape="slinky", nodes=1, max_node_count=8, files={"topology.yaml": ROOT_ONLY})
async def test_slurmd_registers_in_the_place_the_agent_wrote_and_an_empty_label_gives_none(
    cluster: DevCluster, sockdir: Path, kube: tuple[FakeKube, KubeClient]
) -> None:
    fake, client = kube
    slurm = cluster.client()
    fake.add_node("kube-a", labels={ZONE: "a", RACK: "r1"})
    fake.add_node("kube-b", labels={ZONE: "a", RACK: ""})  # the #261 case: an empty label
    base = settings_for(cluster, sockdir, node="", node_name_from="kube-node", topology=SPEC)
    assert await switches(slurm) == {"kubernetes": ""}  # n1 registered with no Topology=: nowhere

    # the release from the cluster's scontrol (its slurmd's release; the agent asks `slurmd -V`)
    s = await naming.resolve(dataclasses.replace(base, kube_node="kube-a"), client.get_node)
    assert await naming.write_topology(s, client.get_node, slurm.version) == "kubernetes:kubernetes:a:a/r1"
    written = (sockdir / naming.TOPOLOGY_FILE).read_text().strip()
    node = await register(cluster, s.node_name, written)
    assert node.state.registered and not node.state.drain, node
    assert node.topology == "kubernetes:kubernetes:a:a/r1"
    placed = {"kubernetes": "kube-a", "a": "kube-a", "a/r1": "kube-a"}
    assert await switches(slurm) == placed  # in place from its first registration: no move needed

    s = await naming.resolve(dataclasses.replace(base, kube_node="kube-b"), client.get_node)
    with capture_logs() as logs:
        assert await naming.write_topology(s, client.get_node, slurm.version) == ""
    assert (sockdir / naming.TOPOLOGY_FILE).read_text() == ""
    assert [e["why"] for e in logs if e["event"] == "topology_at_registration_skipped"] == [
        f"label {RACK} is empty"
    ]
    node = await register(cluster, s.node_name, "")
    assert node.state.registered and not node.state.drain and node.topology == "", node
    assert await switches(slurm) == placed  # kube-b registered, outside the topology

    # why an empty unit must never be sent: slurmctld takes it and leaves the node out, silently
    node = await register(cluster, "e-empty", "kubernetes:")
    assert node.state.registered and not node.state.drain and node.topology == "kubernetes:", node
    assert await switches(slurm) == placed
    # a topology slurmctld has not loaded (a --topology-name that is not in topology.yaml) costs the
    # node: it registers drained. The agent cannot see topology.yaml: the flags must match it
    node = await register(cluster, "e-other", "other:x")
    assert {"INVALID_REG", "DRAIN"} <= node.state.flags, node
    assert node.reason is not None and "Failed to set topology 'other:x'" in node.reason.text

    # unlike an in-place move, a place given at registration outlives a slurmctld restart
    await cluster.restart_slurmctld()
    node = await cluster.wait_node("kube-a", lambda n: n.state.registered, timeout=60)
    assert node.topology == "kubernetes:kubernetes:a:a/r1", node
    assert (await switches(slurm))["a/r1"] == "kube-a"


@pytest.mark.releases("slurm24")
@pytest.mark.cluster(shape="slinky", nodes=1, max_node_count=8)
async def test_before_25_05_the_agent_writes_no_topology_for_slurmd_and_says_so(
    cluster: DevCluster, sockdir: Path, kube: tuple[FakeKube, KubeClient]
) -> None:
    fake, client = kube
    slurm = cluster.client()
    fake.add_node("kube-a", labels={ZONE: "a", RACK: "r1"})
    s = settings_for(cluster, sockdir, node="kube-a", node_name_from="kube-node", kube_node="kube-a")
    s = dataclasses.replace(s, topology=SPEC)
    with capture_logs() as logs:
        assert await naming.write_topology(s, client.get_node, slurm.version) == ""
    assert (sockdir / naming.TOPOLOGY_FILE).read_text() == ""
    said = [e for e in logs if e["event"] == "topology_at_registration_unavailable"]
    assert [e["release"] for e in said] == [str(await slurm.version())], logs
    # what the file would have done: 24.11's slurmd refuses the key and never starts
    cluster.spec.topology["kube-a"] = "kubernetes:kubernetes:a:a/r1"  # type: ignore[index]
    done = await process.run(
        cluster.slurmd_argv("kube-a", "-D"), timeout=30, cwd=cluster.dir, merge_stderr=True
    )
    assert done.returncode != 0 and "unrecognized key: Topology" in done.text(), done.text()
