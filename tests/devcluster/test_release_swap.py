"""A dev cluster moves its daemons from 24.11 to 26.05 on the same database and StateSaveLocation,
slurmdbd first, then slurmctld, then each slurmd: the jobs pending and running before are there
after, and a job that spans the whole move completes and is in `sacct` afterwards."""

from __future__ import annotations

import pytest

from sidecars.devcluster import ClusterSpec, Release
from sidecars.devcluster.release import build_chroot
from sidecars.devcluster.swap import SwappableCluster
from sidecars.slurm import Version
from tests.controlplane.changes.upgrade_records import finished_record


@pytest.mark.timeout(300)
@pytest.mark.releases("slurm24")  # the move is 24.11 -> 26.05: the one upgrade both chroots make
async def test_jobs_survive_every_daemon_moving_to_the_next_release(release: Release) -> None:
    newer = await build_chroot(name="sid")
    async with SwappableCluster(release, ClusterSpec(nodes=2, accounting=True)) as c:
        go = c.out_dir / "go"
        # runs until the test says so: it spans the whole move, whatever the machine's load
        spanning = await c.sbatch(wrap=f"while [ ! -e {go} ]; do sleep 0.2; done")
        await c.wait_job(spanning, "RUNNING", timeout=60)
        pending = await c.sbatch("--hold", wrap="true")
        before = {j.job_id: j.state for j in await c.client().jobs()}
        assert before == {spanning: "RUNNING", pending: "PENDING"}

        await c.swap_slurmdbd(newer)
        assert "slurmdbd version 26.05" in c.slurmdbd_log_tail(limit=100_000)
        await c.swap_slurmctld(newer)
        assert await c.client().version() == Version.parse(newer.version)
        for name in c.node_names:
            await c.swap_slurmd(name, newer)
        nodes = await c.wait_nodes(
            lambda ns: all(n.state.registered for n in ns), timeout=60, what="every slurmd registered"
        )
        assert {n.name for n in nodes} == set(c.node_names)
        after = {j.job_id: j.state for j in await c.client().jobs()}
        assert after == before

        go.touch()
        await c.wait_job(spanning, "COMPLETED", timeout=60)
        assert await finished_record(c, spanning) == ("COMPLETED", "0:0")
        # the held job was kept, and runs on the new release once released
        await c.client().run("scontrol", "release", str(pending))
        await c.wait_job(pending, "COMPLETED", timeout=60)
        assert await finished_record(c, pending) == ("COMPLETED", "0:0")
