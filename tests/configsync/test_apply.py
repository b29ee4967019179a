"""Valid changes reach slurmctld in place, verified; several files are one change."""

from __future__ import annotations

from sidecars.devcluster import DevCluster
from tests.configsync.harness import config_sync, set_sha


async def test_startup_adopts_the_running_config(cluster: DevCluster) -> None:
    async with config_sync(cluster) as sync:
        st = await sync.status()
        assert st["applied"]["generation"] == 1
        assert st["applied"]["sha256"] == set_sha(sync.base or {})
        assert st["rejected"] is None and st["pending"] is False and st["restart_required"] is False
        assert (cluster.conf_path.parent / "slurm.conf").is_symlink()
        assert sync.target_sha() == st["applied"]["sha256"]


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
        st = await sync.service.wait_until(lambda s: s["pending"], 8.0)
        assert st["rejected"] is None and st["applied"]["generation"] == 1
        # the controller comes back on the old set; the change follows without anyone asking
        await cluster.start_slurmctld()
        st = await sync.wait(set_sha(files), within=15.0)
        assert st["applied"]["generation"] == 2
        assert (await cluster.client().partitions())[0].max_time_minutes == 33
