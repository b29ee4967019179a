"""Changes Slurm cannot take by reconfigure: held by default, or applied by restarting slurmctld."""

from __future__ import annotations

import pytest

from sidecars.devcluster import DevCluster
from tests.configsync.harness import bump_max_job_count, config_sync, container_restarts, set_sha


async def test_hold_keeps_the_last_known_good(cluster: DevCluster) -> None:
    job = await cluster.sbatch(wrap="sleep 600")
    async with config_sync(cluster) as sync:
        pid = cluster.hostpid("slurmctld")
        files = bump_max_job_count(sync.good())
        sync.config.write(files)
        st = await sync.wait(set_sha(files), key="rejected")
        assert st["restart_required"] is True
        assert "maxjobcount changed" in st["rejected"]["reason"].lower()
        assert "slurm.conf(5)" in st["rejected"]["reason"]
        assert sync.target_sha() == st["applied"]["sha256"] != set_sha(files)
        assert cluster.hostpid("slurmctld") == pid
        assert await sync.metric("slurm_sidecars_config_restart_required") == 1
        await cluster.wait_job(job, "RUNNING")


@pytest.mark.per_release("each release's slurmctld stop, start and state recovery")
async def test_restart_policy_restarts_slurmctld_and_verifies(cluster: DevCluster) -> None:
    job = await cluster.sbatch(wrap="sleep 600")
    await cluster.wait_job(job, "RUNNING")
    async with (
        config_sync(cluster, restart_policy="restart") as sync,
        container_restarts(cluster) as restarts,
    ):
        pid = cluster.hostpid("slurmctld")
        files = bump_max_job_count(sync.good())
        sync.config.write(files)
        st = await sync.wait(set_sha(files), within=30.0)
        assert st["applied"]["generation"] == 2 and st["restart_required"] is False
        assert restarts and cluster.hostpid("slurmctld") != pid
        assert (await cluster.client().show_config())["MaxJobCount"] == "12345"
        assert any(reason == "ConfigApplied" and "restarting" in msg for reason, msg, _ in sync.events.events)
        await cluster.wait_job(job, "RUNNING")


async def test_restart_that_never_comes_back_restores_the_last_known_good(cluster: DevCluster) -> None:
    async with config_sync(cluster, restart_policy="restart", restart_timeout_seconds=2.0) as sync:
        good = sync.target_sha()
        files = bump_max_job_count(sync.good())
        sync.config.write(files)  # nobody restarts slurmctld this time
        st = await sync.wait(set_sha(files), key="rejected", within=30.0)
        assert "did not come back" in st["rejected"]["reason"]
        assert sync.target_sha() == good
        assert await sync.metric("slurm_sidecars_config_applies_total", result="rolled_back") == 1
        # the next start of slurmctld is on the last known good set
        await cluster.start_slurmctld()
        assert (await cluster.client().show_config())["MaxJobCount"] != "12345"
