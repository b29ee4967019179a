"""The dev cluster starts real daemons and leaves nothing behind, whatever ran in it."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest

from sidecars.devcluster import ClusterSpec, DevCluster, Release


def _mounts_under(root: Path | None) -> list[str]:
    if root is None:
        return []
    with open("/proc/mounts") as f:
        return [line for line in f if f" {root}/" in line]


@pytest.mark.per_release("each release's daemons, their children and their ends")
async def test_running_jobs_and_daemons_are_gone_after_stop(release: Release) -> None:
    c = DevCluster(release, ClusterSpec(nodes=2))
    await c.start()
    try:
        job = await c.sbatch("-N", "1", wrap="sleep 600")
        await c.wait_job(job, "RUNNING", timeout=30)
        # RUNNING is slurmctld's word; the node's processes follow a moment later (seen late on a
        # loaded machine), so look until they are all there
        wanted = {"slurmctld", "slurmd", "munged", "slurmstepd"}
        names: set[str] = set()
        for _ in range(200):
            names = set()
            for p in c.processes():
                with contextlib.suppress(OSError):  # a process may end between listing and reading
                    names.add(Path(f"/proc/{p}/comm").read_text().strip())
            if wanted <= names:
                break
            await asyncio.sleep(0.05)
        assert wanted <= names, names
    finally:
        await c.stop()
    assert c.processes() == []
    assert not c.dir.exists()
    assert _mounts_under(release.root) == []


@pytest.mark.per_release("the ports and files each release's daemons take")
async def test_two_clusters_run_side_by_side(release: Release) -> None:
    a, b = DevCluster(release, ClusterSpec(nodes=1)), DevCluster(release, ClusterSpec(nodes=1))
    async with a, b:
        assert a.ports is not None and b.ports is not None
        assert a.ports.slurmctld != b.ports.slurmctld
        ja, jb = await asyncio.gather(a.sbatch(wrap="true"), b.sbatch(wrap="true"))
        await asyncio.gather(a.wait_job(ja, "COMPLETED"), b.wait_job(jb, "COMPLETED"))
    assert a.processes() == [] and b.processes() == []


@pytest.mark.cluster(nodes=2)
@pytest.mark.per_release("each release's slurmd registration after a kill")
async def test_kill_and_restart_slurmd(cluster: DevCluster) -> None:
    old = await cluster.kill_slurmd("n1")
    assert not os.path.exists(f"/proc/{old}/cmdline") or cluster.hostpid("slurmd-n1") != old
    await cluster.start_slurmd("n1")
    new = cluster.hostpid("slurmd-n1")
    assert new is not None and new != old
    await cluster.wait_node("n1", lambda n: n.state.base == "IDLE" and n.state.registered)


@pytest.mark.cluster(nodes=1)
@pytest.mark.per_release("each release's slurmctld state save and recovery")
async def test_restart_slurmctld_keeps_running_job(cluster: DevCluster) -> None:
    job = await cluster.sbatch(wrap="sleep 600")
    await cluster.wait_job(job, "RUNNING")
    before = cluster.hostpid("slurmctld")
    await cluster.restart_slurmctld()
    assert cluster.hostpid("slurmctld") not in (None, before)
    await cluster.wait_job(job, "RUNNING")
