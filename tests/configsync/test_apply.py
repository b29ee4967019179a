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
