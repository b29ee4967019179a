"""The dry run of every controller pod reads the shared StateSaveLocation and never writes to it."""

from __future__ import annotations

import pytest

from sidecars.devcluster import DevCluster
from tests.configsync.hapair import HA_SPEC, ha_pair, state_fingerprint, with_min_job_age
from tests.configsync.harness import set_sha

pytestmark = [pytest.mark.releases("slurm24", "slurm26"), pytest.mark.cluster(**HA_SPEC)]


@pytest.mark.per_release("what each release's throwaway slurmctld reads and writes in StateSaveLocation")
async def test_the_dry_runs_leave_the_shared_state_untouched(cluster: DevCluster) -> None:
    async with ha_pair(cluster) as pair:
        job = await cluster.sbatch("-N", "1", wrap="sleep 300")  # a job in the state the dry runs load
        await cluster.wait_job(job, "RUNNING", timeout=30)
        await cluster.job_state_saved(job)
        # nothing else may write the state meanwhile: both controllers go (the backup first, or it
        # would take control), so no pod writes either, and each pod's dry run is all that reads it
        await cluster.kill_controller("ctld-b")
        await cluster.kill_controller("ctld-a")
        state = cluster.dir / "state"
        before = state_fingerprint(state)
        assert "job_state" in before
        files = with_min_job_age(pair.good(), 191)
        pair.config.write(files)
        sha = set_sha(files)
        for pod in pair.pods.values():
            # validated (the dry run on the shared state among it), then held: no controller in control
            st = await pod.service.wait_until(lambda s: s["ha"]["waiting_for"] == sha, 60)
            assert st["rejected"] is None and st["applied"]["sha256"] != sha
            count = pod.registry.get_sample_value("slurm_sidecars_config_dry_run_seconds_count")
            assert count is not None and count >= 1
        assert state_fingerprint(state) == before
