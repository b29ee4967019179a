"""Reservations, dynamic nodes, config, sdiag and release detection against real daemons."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from sidecars.devcluster import DevCluster
from sidecars.slurm import SlurmClient, SlurmCommandError, SlurmMetrics


@pytest.mark.cluster(nodes=2)
async def test_reservation_create_and_delete(cluster: DevCluster) -> None:
    client = cluster.client()
    await client.create_reservation("maint-n2", ["n2"])
    shown = await client.run("scontrol", "-o", "show", "reservation", "maint-n2")
    assert "Nodes=n2" in shown.stdout and "MAINT" in shown.stdout
    await client.delete_reservation("maint-n2")
    with pytest.raises(SlurmCommandError):
        await client.run("scontrol", "-o", "show", "reservation", "maint-n2")


@pytest.mark.cluster(nodes=1, max_node_count=4)
async def test_dynamic_node_create_and_delete(cluster: DevCluster) -> None:
    client = cluster.client()
    await client.create_node({"nodename": "dyn1", "state": "FUTURE", "cpus": "1", "realmemory": "1000"})
    node = await client.node("dyn1")
    assert node is not None and node.state.base == "FUTURE" and not node.state.registered
    await client.delete_node("dyn1")
    assert await client.node("dyn1") is None


@pytest.mark.cluster(nodes=1)
async def test_config_sdiag_and_release_detected_once(cluster: DevCluster) -> None:
    registry = CollectorRegistry()
    client = SlurmClient(env=cluster.env, metrics=SlurmMetrics(registry))
    conf = await client.show_config()
    assert cluster.ports is not None
    assert conf["SlurmctldPort"] == str(cluster.ports.slurmctld)
    assert conf["SLURM_VERSION"] == cluster.release.version
    before = (await client.sdiag_rpcs()).get("REQUEST_NODE_INFO", 0)
    for _ in range(3):
        await client.nodes()
        await client.jobs()
    after = (await client.sdiag_rpcs())["REQUEST_NODE_INFO"]
    assert after >= before + 3
    versions = registry.get_sample_value(
        "slurm_sidecars_slurm_commands_total", {"command": "scontrol", "result": "ok"}
    )
    assert versions == 1  # `scontrol --version`, once for the client's whole life
