"""The workers' roll reads slurmdbd's release too (from slurmdbd itself): a slurmdbd older than
slurmctld, or one whose release cannot be read, refuses `upgrade start` with nothing written;
once slurmdbd runs the newer release the same start is taken. 24.11 -> 26.05 on real daemons."""

from __future__ import annotations

import pytest

from sidecars.devcluster import ClusterSpec, Release
from sidecars.devcluster.release import build_chroot
from sidecars.devcluster.swap import SwappableCluster
from tests.controlplane.conftest import control_plane
from tests.fakekube import FakeKube

pytestmark = [pytest.mark.releases("slurm24"), pytest.mark.timeout(240)]  # the one upgrade made here


async def test_a_roll_waits_for_slurmdbd_to_be_upgraded_first(
    release: Release, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    newer = await build_chroot(name="sid")
    for node in ("n1", "n2"):
        fake.add_pod(
            f"worker-{node}",
            hostname=node,
            labels={"app": "slurmd", "controller-revision-hash": "old"},
            owner_kind="StatefulSet",
        )
    async with SwappableCluster(release, ClusterSpec(nodes=2, accounting=True)) as c:
        await c.swap_slurmctld(newer)  # out of Slurm's order: slurmctld before slurmdbd
        start = {"revision": "new", "budget": "1"}
        async with control_plane(c, kube_url=url) as cp:
            status, text = await cp.post("/v1/upgrade", start)
            assert status == 409, text
            assert f"slurmdbd {release.version} is older than slurmctld {newer.version}" in text
            await c.stop_slurmdbd()
            status, text = await cp.post("/v1/upgrade", start)
            assert status == 409 and "slurmdbd's release could not be read" in text, text
            assert fake.config_maps == {}  # refused: nothing written
            await c.swap_slurmdbd(newer)
            status, text = await cp.post("/v1/upgrade", start)
            assert status == 201, text
