"""The control plane's own Slurm clients stay one image behind through a whole-cluster upgrade in
Kubernetes: its Deployment (manifests/overlays/upgrades) is not one of the workloads the stages move,
so after slurmdbd and slurmctld run 26.05 it still runs 24.11's commands. Slurm accepts clients of
the three previous major releases since 24.11: here, on real daemons, what the control plane reads
and writes through its SlurmClient still works (docs/upgrades.md, "The control plane's own image")."""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sidecars.devcluster import ClusterSpec, Release
from sidecars.devcluster.files import CLIENT_COMMANDS
from sidecars.devcluster.release import build_chroot
from sidecars.devcluster.swap import SwappableCluster
from sidecars.slurm import SlurmClient, running_releases
from tests.helpers import eventually

pytestmark = [pytest.mark.releases("slurm24"), pytest.mark.timeout(300)]


def pinned_clients(c: SwappableCluster, release: Release, bin_dir: Path) -> SlurmClient:
    """A SlurmClient whose commands are `release`'s whatever the daemons run: what a control plane
    whose image did not move runs (the cluster's own shims follow the daemons)."""
    bin_dir.mkdir()
    for cmd in CLIENT_COMMANDS:
        words = c.in_release(release, cmd)
        (bin_dir / cmd).write_text("#!/bin/sh\nexec " + shlex.join(words) + ' "$@"\n')
        (bin_dir / cmd).chmod(0o755)
    env = dict(c.env)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    return SlurmClient(env=env, timeout=20.0)


@pytest.fixture
async def moved(release: Release) -> AsyncIterator[tuple[SwappableCluster, SlurmClient, Release]]:
    newer = await build_chroot(name="sid")
    async with SwappableCluster(release, ClusterSpec(nodes=1, accounting=True)) as c:
        try:
            old = pinned_clients(c, release, c.dir / "pinned-clients")
            job = await c.sbatch("--hold", wrap="true")  # in the queue through both moves
            await c.swap_slurmdbd(newer)
            await c.swap_slurmctld(newer)
            yield c, old, newer
            await c.scancel(job)
        finally:
            await c.stop()


async def test_the_control_planes_older_clients_read_and_write_a_moved_cluster(
    moved: tuple[SwappableCluster, SlurmClient, Release], release: Release
) -> None:
    c, old, newer = moved
    assert str(await old.version()) == release.version  # the commands really are the old ones
    # the upgrade's own reading of the releases: slurmdbd's through `sacctmgr show config`
    found = await running_releases(old, "slurmctld")
    assert str(found["slurmdbd"]) == newer.version
    assert str(found["slurmctld:slurmctld"]) == newer.version
    # what each round reads
    [node] = await old.nodes()
    assert node.name == "n1"
    assert [j.job_id for j in await old.jobs()]
    assert [j.job_id for j in await old.job_summaries()]
    assert [p.name for p in await old.partitions()]
    assert await old.reservations() == []
    # and a write, read back through the new release's clients
    await old.drain(["n1"], "pinned-client-drain")
    new = c.client(timeout=20.0)
    drained = await eventually(lambda: new.node("n1"), lambda n: n is not None and "DRAIN" in n.state.flags)
    assert drained is not None and drained.reason is not None and drained.reason.text == "pinned-client-drain"
    await old.undrain(["n1"])
    await eventually(lambda: new.node("n1"), lambda n: n is not None and "DRAIN" not in n.state.flags)
