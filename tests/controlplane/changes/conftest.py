"""The whole-cluster upgrade tests' fixtures: the release they upgrade to, and the dev cluster with
accounting that the API tests swap (a test file asks for it by importing `swappable_cluster`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sidecars.devcluster import ClusterSpec, Release
from sidecars.devcluster.release import build_chroot
from sidecars.devcluster.swap import SwappableCluster


@pytest.fixture
async def newer() -> Release:
    """26.05, the sid chroot's: the release every upgrade test moves 24.11 to."""
    return await build_chroot(name="sid")


@pytest.fixture
async def swappable_cluster(release: Release) -> AsyncIterator[SwappableCluster]:
    """Two workers with accounting; slurmctld in the foreground, so its release can be swapped."""
    async with SwappableCluster(release, ClusterSpec(nodes=2, accounting=True, foreground_ctld=True)) as c:
        yield c
