"""`DevCluster.job_state_saved`: the wait that what a restarted, dry-run or backup controller
recovers holds a job as it is now. It asks slurmctld for a save and finds its own marker in the
saved bytes, so a save already written before the wait began cannot be missed (the old wait, for a
job_state newer than "now", waited for the next change or Slurm's 5-minute checkpoint when the
save that held the job's start came before it looked: seen as a 30 s timeout under load)."""

from __future__ import annotations

import pytest

from sidecars.devcluster import DevCluster

pytestmark = [
    pytest.mark.cluster(nodes=1, foreground_ctld=True),
    pytest.mark.per_release("each release writes job_state in its own format: the marker is found in each"),
]


async def test_a_job_saved_running_is_recovered_running_after_a_crash(cluster: DevCluster) -> None:
    job = await cluster.sbatch(wrap="sleep 600")
    await cluster.wait_job(job, "RUNNING")
    await cluster.job_state_saved(job)
    # again at once: nothing of the job is left unsaved, and the wait still ends (it asks for its save)
    await cluster.job_state_saved(job)
    await cluster.stop_slurmctld(crash=True)  # whatever was not saved is lost
    await cluster.start_slurmctld()
    recovered = await cluster.client().job(job)
    assert recovered is not None and recovered.state == "RUNNING", recovered
