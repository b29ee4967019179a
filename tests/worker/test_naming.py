"""The agent's own Slurm node name from its Kubernetes Node (read through the fake API), and the
files that hand it, and what slurmd registers with, to slurmd. No Slurm needed: all of it is
decided before slurmd runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from sidecars.kube import KubeClient
from sidecars.kube.gpudomain import CLIQUE_LABEL
from sidecars.kube.nodename import ANNOTATION
from sidecars.kube.topology import Placement, TopologySpec, placement
from sidecars.slurm import Version
from sidecars.worker import naming
from sidecars.worker.settings import WorkerSettings
from tests.fakekube import FakeKube
from tests.settings import build


def settings(tmp_path: Path, annotation: str = ANNOTATION, source: str = "kube-node") -> WorkerSettings:
    return build(
        WorkerSettings,
        node_name="" if source == "kube-node" else "n1",
        socket_path=tmp_path / "a.sock",
        state_dir=tmp_path,
        pod_name="ds-x1",
        node_name_from=source,
        kube_node="k1",
        node_name_annotation=annotation,
    )


async def test_the_node_name_or_its_override_is_the_slurm_node_name(
    tmp_path: Path, kube: tuple[FakeKube, KubeClient]
) -> None:
    fake, client = kube
    fake.add_node("k1")
    s = await naming.resolve(settings(tmp_path), client.get_node)
    assert s.node_name == "k1"
    fake.annotate_node("k1", {ANNOTATION: "gpu-a"})
    s = await naming.resolve(settings(tmp_path), client.get_node)
    assert s.node_name == "gpu-a"
    path = naming.write_name(s)
    assert path.read_text() == "gpu-a\n" and [p.name for p in tmp_path.iterdir()] == [naming.NAME_FILE]


async def test_a_malformed_override_or_a_missing_node_stops_the_agent_before_anything_runs(
    tmp_path: Path, kube: tuple[FakeKube, KubeClient]
) -> None:
    fake, client = kube
    with pytest.raises(naming.NameUnresolved, match="Kubernetes node k1 not found"):
        await naming.resolve(settings(tmp_path), client.get_node)
    fake.add_node("k1", annotations={ANNOTATION: "gpu a"})
    with pytest.raises(naming.NameUnresolved, match="'gpu a'"):
        await naming.resolve(settings(tmp_path), client.get_node)
    # without the API the override cannot be read: no guess that could claim another's node
    with pytest.raises(naming.NameUnresolved, match="no Kubernetes API"):
        await naming.resolve(settings(tmp_path), None)
    assert not (tmp_path / naming.NAME_FILE).exists()


async def test_the_registration_features_come_from_the_clique_label_checked(
    tmp_path: Path, kube: tuple[FakeKube, KubeClient]
) -> None:
    fake, client = kube
    fake.add_node("k1", labels={CLIQUE_LABEL: "uuid-1.7"})
    s = await naming.resolve(settings(tmp_path), client.get_node)
    assert await naming.write_features(s, client.get_node) == "nvlink-clique-uuid-1.7"
    assert (tmp_path / naming.FEATURES_FILE).read_text() == "nvlink-clique-uuid-1.7\n"
    for bad in ("", "a b", "x,y"):  # never an empty or malformed Features= for slurmd
        fake.label_node("k1", {CLIQUE_LABEL: bad})
        assert await naming.write_features(s, client.get_node) == ""
        assert (tmp_path / naming.FEATURES_FILE).read_text() == ""
    assert await naming.write_features(s, None) == ""  # no API: no domain known


async def test_no_override_configured_needs_no_api_and_pod_naming_is_untouched(tmp_path: Path) -> None:
    s = await naming.resolve(settings(tmp_path, annotation=""), None)
    assert s.node_name == "k1"
    given = settings(tmp_path, source="pod")
    assert await naming.resolve(given, None) is given


ZONE, RACK = "topology.kubernetes.io/zone", "example.com/rack"


def release(text: str, asked: list[str]) -> naming.GetRelease:
    async def version() -> Version:
        asked.append(text)
        return Version.parse(text)

    return version


async def test_the_registration_topology_is_the_control_planes_place_or_nothing(
    tmp_path: Path, kube: tuple[FakeKube, KubeClient]
) -> None:
    fake, client = kube
    fake.add_node("k1", labels={ZONE: "a", RACK: "r1"})
    tree = dataclasses.replace(settings(tmp_path), node_name="k1", topology=TopologySpec((ZONE, RACK)))
    asked: list[str] = []
    new = release("26.05.5", asked)
    want = placement(TopologySpec((ZONE, RACK)), {ZONE: "a", RACK: "r1"})
    assert isinstance(want, Placement)  # the value the control plane would move the node to
    assert await naming.write_topology(tree, client.get_node, new) == want.in_place(
        TopologySpec((ZONE, RACK))
    )
    assert (tmp_path / naming.TOPOLOGY_FILE).read_text() == "kubernetes:kubernetes:a:a/r1\n"
    block = dataclasses.replace(tree, topology=TopologySpec((ZONE, RACK), "block", "blocks"))
    assert await naming.write_topology(block, client.get_node, new) == "blocks:a/r1"

    # a label missing, empty or malformed: an empty file (never `Topology=t:`), with the reason
    bad: tuple[tuple[dict[str, str | None], str], ...] = (
        ({ZONE: "a", RACK: None}, f"label {RACK} is missing"),
        ({ZONE: "a", RACK: ""}, f"label {RACK} is empty"),
        ({ZONE: "a", RACK: " "}, f"label {RACK} is empty"),
        ({ZONE: "a", RACK: "r 1"}, f"label {RACK}='r 1' is not a value"),
    )
    for labels, why in bad:
        fake.label_node("k1", labels)
        with capture_logs() as logs:
            assert await naming.write_topology(tree, client.get_node, new) == ""
        assert (tmp_path / naming.TOPOLOGY_FILE).read_text() == ""
        skipped = [e["why"] for e in logs if e["event"] == "topology_at_registration_skipped"]
        assert len(skipped) == 1 and skipped[0].startswith(why), logs
    with capture_logs() as logs:  # no API: no Node, no place
        assert await naming.write_topology(tree, None, new) == ""
    assert [e["why"] for e in logs] == ["no Kubernetes Node read"]
    fake.label_node("k1", {ZONE: "a", RACK: "r1"})

    # before 25.05 slurmd refuses Topology= (24.11 does not start): nothing, said once
    with capture_logs() as logs:
        assert await naming.write_topology(tree, client.get_node, release("24.11.5", asked)) == ""
    assert (tmp_path / naming.TOPOLOGY_FILE).read_text() == ""
    assert [(e["event"], e["release"]) for e in logs] == [("topology_at_registration_unavailable", "24.11.5")]

    async def no_slurmd() -> Version:
        raise FileNotFoundError("slurmd")

    with capture_logs() as logs:  # the release cannot be learnt: nothing rather than a guess
        assert await naming.write_topology(tree, client.get_node, no_slurmd) == ""
    assert [e["event"] for e in logs] == ["topology_at_registration_skipped"]

    # no --topology-labels: an empty file (a stale one from an earlier agent is cleared), no question
    asked.clear()
    (tmp_path / naming.TOPOLOGY_FILE).write_text("kubernetes:old\n")
    assert await naming.write_topology(settings(tmp_path), client.get_node, new) == ""
    assert (tmp_path / naming.TOPOLOGY_FILE).read_text() == "" and asked == []
