"""Kubernetes Node labels place each worker's Slurm node: moved in place on 26.05 when a label
changes, never for an empty or malformed value (the node stays, an Event says why), never for a
label that flaps; on 22.05 and 24.11 only the rendered topology.conf, said once."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from sidecars.controlplane.reconcile.topology_files import render_conf, render_yaml
from sidecars.devcluster import DevCluster
from sidecars.kube.topology import TopologySpec
from tests.controlplane.conftest import Running, control_plane
from tests.controlplane.reconcile.settle import settled
from tests.fakekube import FakeKube
from tests.helpers import eventually
from tests.slurm.topology import switches

ZONE, RACK = "topology.kubernetes.io/zone", "example.com/rack"
KEYS = (ZONE, RACK)
EMPTY_TREE = render_yaml(TopologySpec(KEYS, "tree", "kubernetes"), {})  # the root switch alone


def hosts(fake: FakeKube) -> None:
    """w1, w2 (Slurm n1, n2) on k1 in zone a rack r1; w3 (n3) on k2 in zone a rack r2."""
    fake.add_node("k1", labels={ZONE: "a", RACK: "r1"})
    fake.add_node("k2", labels={ZONE: "a", RACK: "r2"})
    for i, host in ((1, "k1"), (2, "k1"), (3, "k2")):
        fake.add_pod(f"w{i}", hostname=f"n{i}", node_name=host)


async def _refreshes(cp: Any) -> float:
    return float(cp.sample("slurm_sidecars_fleet_refreshes_total", result="ok"))


async def passes(cp: Any, count: int = 3) -> None:
    start = await _refreshes(cp)
    await eventually(lambda: _refreshes(cp), lambda n: n >= start + count, what=f"{count} more refreshes")


PLACED = {"kubernetes": "n[1-3]", "a": "n[1-3]", "a/r1": "n[1-2]", "a/r2": "n3"}  # as hosts() labels them


@contextlib.asynccontextmanager
async def placed_in_place(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str], **topology: Any
) -> AsyncIterator[Running]:
    """hosts() on a control plane syncing the topology (with `topology`'s settings), once it has
    placed them in Slurm from their labels."""
    fake, url = fake_kube
    hosts(fake)
    client = cluster.client()
    async with control_plane(cluster, url, topology={"spec": TopologySpec(KEYS), **topology}) as cp:
        await eventually(lambda: cp.leading("topology"), what="leader with pods and nodes")
        await eventually(lambda: switches(client), lambda s: s == PLACED, what="placed from the labels")
        yield cp


def events(fake: FakeKube, reason: str) -> list[dict[str, Any]]:
    return [e for e in fake.events if e["reason"] == reason]


@pytest.mark.releases("slurm26")
@pytest.mark.cluster(nodes=3, files={"topology.yaml": EMPTY_TREE})
async def test_labels_place_nodes_a_change_moves_one_and_a_bad_value_moves_nothing(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake = fake_kube[0]
    client = cluster.client()
    settle = 1.5
    async with placed_in_place(cluster, fake_kube, configmap="slurm-topology", settle_seconds=settle) as cp:
        plane = cp.plane
        assert plane.writers["topology"].status()["mode"] == "in-place"
        # counted once each call has returned, after Slurm shows the place
        await eventually(lambda: plane.writers["topology"].moves, lambda m: m >= 3, what="the moves counted")
        assert plane.writers["topology"].moves == 3  # n[1-2] in one call, n3 in another

        # k2 joins rack r1: n3 is moved in place (no reconfigure), after the label has settled
        fake.label_node("k2", {RACK: "r1"})
        changed = time.monotonic()
        moved = {"kubernetes": "n[1-3]", "a": "n[1-3]", "a/r1": "n[1-3]", "a/r2": ""}
        await eventually(lambda: switches(client), lambda s: s == moved, what="n3 moved to a/r1")
        assert time.monotonic() - changed >= settle - 0.5
        node = await client.node("n3")
        assert node is not None and node.topology == "kubernetes:kubernetes:a:a/r1"
        await eventually(lambda: plane.writers["topology"].moves, lambda m: m >= 4, what="the move counted")
        assert plane.writers["topology"].moves == 4

        # k1's rack label emptied, then made unusable: nothing reaches Slurm, an Event per pod
        fake.label_node("k1", {RACK: ""})
        got = await eventually(
            lambda: _events(fake), lambda es: len(es) >= 2, what="SlurmTopologyRefused on w1 and w2"
        )
        assert sorted(e["involvedObject"]["name"] for e in got) == ["w1", "w2"]
        assert all(e["type"] == "Warning" and f"label {RACK} is empty" in e["message"] for e in got)
        fake.label_node("k1", {RACK: "r1 bis"})
        await eventually(lambda: _events(fake), lambda es: len(es) >= 4, what="the second refusal")
        await settled(cp)  # the writer's own passes: a slow round can lag the refreshes
        assert await switches(client) == moved  # n1, n2 stay where they were
        for name in ("n1", "n2"):
            node = await client.node(name)
            assert node is not None and node.topology == "kubernetes:kubernetes:a:a/r1"
        assert plane.writers["topology"].moves == 4 and plane.writers["topology"].last_error is None
        assert plane.writers["topology"].status()["refused"] == {
            "n1": f"label {RACK}='r1 bis' is not a value Slurm can take (letters, digits, '-', '_', '.')",
            "n2": f"label {RACK}='r1 bis' is not a value Slurm can take (letters, digits, '-', '_', '.')",
        }
        assert len(events(fake, "SlurmTopologyRefused")) == 4  # once per pod and value, not once per pass

        # the rendered file keeps the refused nodes at their last good place
        data = fake.config_maps[("slurm", "slurm-topology")]["data"]
        assert set(data) == {"topology.yaml"}
        assert '- switch: "a/r1"\n        nodes: "n[1-3]"' in data["topology.yaml"]
        # ... and is what Slurm loads: applied as config-sync would (file + reconfigure), same tree
        (cluster.dir / "etc" / "topology.yaml").write_text(data["topology.yaml"])
        await client.reconfigure()
        await eventually(
            lambda: switches(client),
            lambda s: s == {"kubernetes": "n[1-3]", "a": "n[1-3]", "a/r1": "n[1-3]"},
            what="the rendered file loaded",
        )


async def _events(fake: FakeKube) -> list[dict[str, Any]]:
    return events(fake, "SlurmTopologyRefused")


@pytest.mark.releases("slurm26")
@pytest.mark.cluster(nodes=3, files={"topology.yaml": EMPTY_TREE})
async def test_a_flapping_label_moves_nothing_and_a_restart_is_healed(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake = fake_kube[0]
    client = cluster.client()
    # the flips below take about 2 s on a quiet machine, and several times that under a full suite's
    # load (each waits for a watch event and a refresh): well inside it either way
    settle = 15.0
    async with placed_in_place(cluster, fake_kube, settle_seconds=settle) as cp:
        plane = cp.plane
        moves = plane.writers["topology"].moves

        async def seen(rack: str) -> bool:
            nodes = plane.workers.nodes
            return nodes is not None and nodes.nodes["k2"].labels.get(RACK) == rack

        # k2's rack flips r2 -> r9 -> r2 ... each state seen, none held for `settle`
        started = time.monotonic()
        for rack in ("r9", "r2") * 3:
            fake.label_node("k2", {RACK: rack})
            await eventually(lambda r=rack: seen(r), bool, what=f"k2 rack={rack} in the cache")
            await passes(cp, 1)
        took = time.monotonic() - started
        assert took < settle, f"the flips took {took:.1f}s, not inside the settle time: nothing shown"
        await settled(cp)  # the writer's own passes: a slow round can lag the refreshes
        await eventually(
            lambda: _refreshes(cp), lambda _: time.monotonic() - started > settle + 1, what="settle"
        )
        assert plane.writers["topology"].moves == moves  # every state but the last held shorter than `settle`
        assert await switches(client) == PLACED

        # slurmctld restarts and forgets in-place places: the next passes put the nodes back
        await cluster.restart_slurmctld()
        await eventually(lambda: switches(client), lambda s: s == PLACED, what="placed again", within=60)


@pytest.mark.releases("slurm22", "slurm24")
@pytest.mark.cluster(nodes=3)
async def test_before_25_05_the_rendered_topology_conf_is_the_fallback(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    hosts(fake)
    fake.label_node("k2", {RACK: ""})  # refused here too: the file keeps n3 out, not under ""
    client = cluster.client()
    with capture_logs() as logs:
        async with control_plane(
            cluster,
            url,
            topology={"spec": TopologySpec(KEYS), "configmap": "slurm-topology", "settle_seconds": 0},
        ) as cp:
            await eventually(lambda: cp.leading("topology"), what="leader with pods and nodes")
            cm = await eventually(
                lambda: _config_map(fake), lambda d: d is not None and "n[1-2]" in d.get("topology.conf", "")
            )
            assert cm is not None and set(cm) == {"topology.conf"}
            status = cp.plane.writers["topology"].status()
            assert status["mode"] == "file" and status["file"] == "topology.conf"
            assert status["refused"] == {"n3": f"label {RACK} is empty"}
            await settled(cp)  # the writer's own passes: a slow round can lag the refreshes
            assert cp.plane.writers["topology"].moves == 0 and cp.plane.writers["topology"].last_error is None
            said = [e for e in logs if e["event"] == "topology_in_place_unavailable"]
            assert len(said) == 1 and said[0]["release"] == cluster.release.version
            assert await _config_map(fake) == cm  # written once: it has not changed
            writes = fake.answered("PUT", "/configmaps/slurm-topology", 200)
            writes += fake.answered("POST", "/configmaps", 201)
            assert len(writes) == 1  # the first write creates it (a PUT answered 404, then a POST)
    expected = render_conf(
        TopologySpec(KEYS, "tree", "kubernetes"),
        {n: p for n, p in cp.plane.writers["topology"].placed.items()},
    )
    assert cm["topology.conf"] == expected
    # ... and the real slurmctld of this release loads it with topology/tree
    (cluster.dir / "etc" / "topology.conf").write_text(cm["topology.conf"])
    conf = cluster.conf_path.read_text() + "TopologyPlugin=topology/tree\n"
    cluster.conf_path.write_text(conf)
    await cluster.restart_slurmctld()
    got = await switches(client)
    assert got == {"kubernetes": "n[1-2]", "a": "n[1-2]", "a/r1": "n[1-2]"}


async def _config_map(fake: FakeKube) -> dict[str, str] | None:
    found = fake.config_maps.get(("slurm", "slurm-topology"))
    return None if found is None else dict(found["data"])
