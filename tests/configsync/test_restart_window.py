"""Never restart on a bad set: a slurmctld that starts at any moment of a failing apply reads a set
it can run on, the last known good one.

With the dry run a set slurmctld cannot start on is usually refused before it is staged. But the
dry run is not counted on: a set that passed it and then kills slurmctld is on disk unverified until
the rollback. So the window is closed by construction: config-sync marks a set unverified from its
swap until its verification ends, and `slurm-sidecars config-guard`, run by slurmctld's entrypoint,
puts the last verified set back before slurmctld reads the files (stage.py, guard/main.py).
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from sidecars.devcluster import DevCluster
from sidecars.runtime.waits import within
from tests.configsync.harness import config_sync, container_start, parser_only, set_sha

pytestmark = pytest.mark.cluster(nodes=1, foreground_ctld=True)

KILLER = b"Licenses=foo:abc\n"  # passes Slurm's client parse and our rules; slurmctld dies of it


@pytest.mark.timeout(300)
async def test_a_restart_at_any_moment_of_a_refused_change_reads_the_good_set(cluster: DevCluster) -> None:
    job = await cluster.sbatch(wrap="sleep 600")
    await cluster.wait_job(job, "RUNNING")
    rng = random.Random(20261201)
    async with config_sync(cluster) as sync:
        good = sync.target_sha()
        for i in range(6):
            bad = {**sync.good(), "slurm.conf": sync.good()["slurm.conf"] + KILLER + f"# try {i}\n".encode()}
            sync.config.write(bad)
            # a restart somewhere within the change's validation and dry run (~0.1-0.6 s)
            await asyncio.sleep(rng.uniform(0.0, 0.6))
            assert sync.target_sha() == good, f"try {i}: the target holds an unverified set"
            await cluster.stop_slurmctld(crash=True)
            await cluster.start_slurmctld()  # raises if it dies at start
            assert "foo" not in (await cluster.client().show_config()).get("Licenses", "")
            st = await sync.wait(set_sha(bad), key="rejected", within=30.0)
            assert "Invalid configured licenses" in st["rejected"]["reason"], st["rejected"]["reason"]
            assert sync.target_sha() == good
        await cluster.wait_job(job, {"RUNNING", "PENDING"})  # 22.05 may requeue a job it had not saved


@pytest.mark.timeout(300)
@pytest.mark.per_release(
    "when a killing set kills slurmctld (reconfigure on 22.05, re-exec on 23.11+) is each release's"
)
async def test_without_the_dry_run_the_window_is_the_verification(cluster: DevCluster) -> None:
    """The bound where a set reaches the disk unverified: from its swap to the rollback. Shown with
    the dry run left out, on a set that kills slurmctld: the rollback comes within seconds, and the
    restart after it reads the good set."""
    swaps: list[float] = []

    def checkpoint(step: str) -> None:
        if step in ("swapped", "restored"):  # the set in, and the good one back
            swaps.append(time.monotonic())

    async with config_sync(cluster, validator_factory=parser_only, checkpoint=checkpoint) as sync:
        good = sync.target_sha()
        swaps.clear()
        bad = {**sync.good(), "slurm.conf": sync.good()["slurm.conf"] + KILLER}
        sync.config.write(bad)
        st = await sync.wait(set_sha(bad), key="rejected", within=60.0)
        assert sync.target_sha() == good and len(swaps) == 2, swaps
        window = swaps[1] - swaps[0]
        print(f"unverified set on disk for {window:.2f}s on {cluster.release} (swap -> rollback)")
        assert "Invalid configured licenses" in st["rejected"]["reason"]
        await cluster._poll(
            cluster._async(lambda: cluster.foreground_exit), lambda rc: rc is not None, 10, "slurmctld exit"
        )
        await cluster.start_slurmctld()  # the container's restart, on the rolled-back files
        assert (await cluster.client().ping()).up


@pytest.mark.timeout(600)
@pytest.mark.per_release(
    "when a killing set kills slurmctld (reconfigure on 22.05, re-exec on 23.11+) is each release's"
)
async def test_a_restart_at_any_instant_of_a_killing_apply_reads_the_last_good_set(
    cluster: DevCluster,
) -> None:
    """Without the dry run a set that kills slurmctld reaches the disk and the live slurmctld. A
    restart at a random instant from its swap (before the reconfigure, during the verification,
    after slurmctld died of it, after the rollback) must always come up on the good set, and no
    job may be lost."""
    job = await cluster.sbatch(wrap="sleep 900")
    await cluster.wait_job(job, "RUNNING")
    rng = random.Random(20261201)
    swapped = asyncio.Event()

    def checkpoint(step: str) -> None:
        if step == "swapped":
            swapped.set()

    restored_by_guard = 0
    async with config_sync(cluster, validator_factory=parser_only, checkpoint=checkpoint) as sync:
        good = sync.target_sha()
        target = str(sync.settings.target)
        for i in range(6):
            swapped.clear()
            bad = {**sync.good(), "slurm.conf": sync.good()["slurm.conf"] + KILLER + f"# try {i}\n".encode()}
            sync.config.write(bad)
            await within(swapped.wait(), 30)  # the unverified set is on disk from here
            await asyncio.sleep(rng.uniform(0.0, 2.5))  # the instant of the "container restart"
            await cluster.stop_slurmctld(crash=True)  # dead already when the set killed it
            said = await container_start(cluster, target)
            restored_by_guard += "put generation" in said
            config = await cluster.client().show_config()
            assert "foo" not in config.get("Licenses", ""), f"try {i}: slurmctld runs the killing set"
            st = await sync.wait(set_sha(bad), key="rejected", within=60.0)
            assert sync.target_sha() == good == st["applied"]["sha256"], f"try {i}"
            assert (await cluster.client().ping()).up
            if "put generation" in said:  # config-sync saw and said what the guard did
                assert "config-guard put generation" in st["rejected"]["reason"], st["rejected"]
                assert st["restored"] is not None and st["restored"]["by"] == "config-guard"
        job_now = await cluster.wait_job(job, {"RUNNING", "PENDING"})
        assert job_now.state == "RUNNING" or cluster.release.short == "22.05", job_now
    print(f"{cluster.release}: the guard put the good set back at {restored_by_guard} of 6 restarts")
    assert restored_by_guard >= 1  # the instants drawn include some inside the window
