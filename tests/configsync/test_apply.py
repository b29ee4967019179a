"""Valid changes reach slurmctld in place, verified; several files are one change."""

from __future__ import annotations

import re

import pytest

from sidecars.devcluster import DevCluster
from sidecars.devcluster.ports import lease_ports
from tests.configsync.harness import config_sync, set_sha


async def test_startup_adopts_the_running_config(cluster: DevCluster) -> None:
    async with config_sync(cluster) as sync:
        st = await sync.status()
        assert st["applied"]["generation"] == 1
        assert st["applied"]["sha256"] == set_sha(sync.base or {})
        assert st["rejected"] is None and st["pending"] is False and st["restart_required"] is False
        assert (cluster.conf_path.parent / "slurm.conf").is_symlink()
        assert sync.target_sha() == st["applied"]["sha256"]


@pytest.mark.per_release("23.11+ re-execs slurmctld on reconfigure; 22.05 rereads in place")
async def test_valid_change_is_applied_and_visible(cluster: DevCluster) -> None:
    async with config_sync(cluster) as sync:
        files = sync.good()
        conf = files["slurm.conf"].decode()
        conf = conf.replace("MaxTime=INFINITE", "MaxTime=45").replace("MinJobAge=60", "MinJobAge=120")
        files["slurm.conf"] = conf.encode()
        sync.config.write(files)
        st = await sync.wait(set_sha(files))
        assert st["applied"]["generation"] == 2
        parts = await cluster.client().partitions()
        assert parts[0].max_time_minutes == 45
        config = await cluster.client().show_config()
        assert config["MinJobAge"].startswith("120")
        assert await sync.metric("slurm_sidecars_config_applies_total", result="applied") == 1
        assert sync.target_sha() == set_sha(files)


async def test_two_files_changed_together_are_one_reconfigure(cluster: DevCluster) -> None:
    async with config_sync(cluster) as sync:
        target = cluster.conf_path.parent
        files = sync.good()
        files["slurm.conf"] += f"Include {target}/partitions.conf\n".encode()
        files["partitions.conf"] = b"PartitionName=p2 Nodes=n1 MaxTime=20 State=UP\n"
        sync.config.write(files)
        await sync.wait(set_sha(files))
        parts = {p.name: p for p in await cluster.client().partitions()}
        assert parts["p2"].max_time_minutes == 20 and parts["p2"].nodes == ("n1",)
        reconfigures = await sync.metric(
            "slurm_sidecars_slurm_commands_total", command="scontrol reconfigure", result="ok"
        )
        assert reconfigures == 1
        # removing both again is one change too, and the file's link leaves the target
        sync.config.write(sync.good())
        await sync.wait(set_sha(sync.good()))
        assert not (target / "partitions.conf").exists()
        assert "p2" not in {p.name for p in await cluster.client().partitions()}


async def test_change_waits_while_slurmctld_is_down(cluster: DevCluster) -> None:
    async with config_sync(cluster) as sync:
        await cluster.stop_slurmctld()
        files = sync.good()
        files["slurm.conf"] = files["slurm.conf"].replace(b"MaxTime=INFINITE", b"MaxTime=33")
        sync.config.write(files)
        st = await sync.service.wait_until(lambda s: s["pending"], 30.0)
        assert st["rejected"] is None and st["applied"]["generation"] == 1
        # the controller comes back on the old set; the change follows without anyone asking
        await cluster.start_slurmctld()
        st = await sync.wait(set_sha(files))
        assert st["applied"]["generation"] == 2
        assert (await cluster.client().partitions())[0].max_time_minutes == 33


@pytest.mark.releases("slurm24")  # the rehash timer is ours, not Slurm's: one release shows it
async def test_a_missed_event_is_caught_by_the_periodic_rehash(cluster: DevCluster) -> None:
    async with config_sync(cluster, watch_files=False, rehash_seconds=0.5) as sync:
        files = sync.good()
        files["slurm.conf"] = files["slurm.conf"].replace(b"MaxTime=INFINITE", b"MaxTime=12")
        sync.config.write(files)  # no watcher runs: only the timer can see this
        await sync.wait(set_sha(files))
        assert (await cluster.client().partitions())[0].max_time_minutes == 12


@pytest.mark.per_release("22.05 dies of a new node on reconfigure (held); 24.11+ re-execs and takes it")
async def test_node_added_is_release_aware(cluster: DevCluster) -> None:
    """22.05 dies of a new node on reconfigure (MaxNodeCount): held. 24.11 re-executes and takes it."""
    with lease_ports(1) as lease:  # n9's port: no other cluster's slurmd may answer on it
        await _add_node(cluster, lease.ports[0])


async def _add_node(cluster: DevCluster, port: int) -> None:
    async with config_sync(cluster) as sync:
        files = sync.good()
        conf = files["slurm.conf"].decode()
        n1 = next(ln for ln in conf.splitlines() if ln.startswith("NodeName=n1 "))
        n9 = re.sub(r"Port=\d+", f"Port={port}", n1.replace("NodeName=n1", "NodeName=n9"))
        files["slurm.conf"] = (conf + n9 + "\n").encode()
        sync.config.write(files)
        if cluster.release.short == "22.05":
            st = await sync.wait(set_sha(files), key="rejected")
            assert st["restart_required"] and "nodes added: n9" in st["rejected"]["reason"]
            assert await cluster.client().node("n9") is None
        else:
            st = await sync.wait(set_sha(files))
            assert st["applied"]["generation"] == 2
            assert await cluster.client().node("n9") is not None
