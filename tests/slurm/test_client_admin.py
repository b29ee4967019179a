"""Reservations, dynamic nodes, config, sdiag and release detection against real daemons."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry

from sidecars.devcluster import DevCluster
from sidecars.slurm import SlurmClient, SlurmCommandError, SlurmMetrics

pytestmark = pytest.mark.per_release(
    "the client reads each release's own output: reservations, dynamic nodes, sdiag, version, client parse"
)


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


@pytest.mark.cluster(nodes=3)
async def test_reservations_are_read_back_with_times_nodes_and_flags(cluster: DevCluster) -> None:
    client = cluster.client()
    assert await client.reservations() == []  # "No reservations in the system"
    await client.create_reservation("later", ["n1", "n2"], start="now+3600", duration="90")
    await client.create_reservation("now", ["n3"], flags="MAINT")
    found = {r.name: r for r in await client.reservations()}
    later, now = found["later"], found["now"]
    assert later.nodes == ("n1", "n2") and {"MAINT", "IGNORE_JOBS"} <= later.flags
    assert later.state == "INACTIVE" and now.state == "ACTIVE"
    assert later.start is not None and later.end is not None and later.end - later.start == 90 * 60
    assert later.comment is None and later.users == "root"


@pytest.mark.releases("slurm24", "slurm26")  # reservations have a comment since 23.02
@pytest.mark.cluster(nodes=1)
async def test_a_reservation_comment_with_spaces_is_read_whole(cluster: DevCluster) -> None:
    client = cluster.client()
    await client.create_reservation("c", ["n1"], start="now+600", duration="10", comment="rack 4: PSU swap")
    (resv,) = await client.reservations()
    assert resv.comment == "rack 4: PSU swap"


@pytest.mark.cluster(nodes=1)
async def test_client_parse_of_a_candidate_config_and_boot_time(cluster: DevCluster) -> None:
    client = cluster.client()
    assert str(await client.parse_config(timeout=10)) == cluster.release.version
    bad = cluster.dir / "etc" / "candidate.conf"  # under the cluster dir: the same path in the chroot
    bad.write_text(cluster.conf_path.read_text() + "NoSuchKey=1\n")
    with pytest.raises(SlurmCommandError) as info:
        await client.with_env(SLURM_CONF=str(bad)).parse_config(timeout=10)
    assert "NoSuchKey" in info.value.message  # the parser's own words
    boot = await client.boot_time(timeout=5)
    assert boot.booted == (await client.show_config())["BOOT_TIME"]
    assert boot.asked is not None and boot.booted is not None
    assert boot.asked >= boot.booted  # both local ISO times: ordered as text
    deadline = time.monotonic() + 30
    # 1-s resolution: a restart within the second slurmctld booted in would show the same BOOT_TIME
    while boot.asked == boot.booted:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
        boot = await client.boot_time(timeout=5)
    await cluster.restart_slurmctld()
    deadline = time.monotonic() + 30  # its own room: the wait above may have used the first
    while (now := await client.boot_time(timeout=5)).booted == boot.booted:
        assert time.monotonic() < deadline, "BOOT_TIME never changed after a restart"
        await asyncio.sleep(0.2)
    assert now.booted is not None and now.booted > boot.booted
