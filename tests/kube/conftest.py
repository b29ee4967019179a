from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

import pytest

from sidecars.kube import KubeClient, KubeRetry, LeaseRecord
from tests.fakekube import FakeKube, configuration


@pytest.fixture
def fake(fake_kube: tuple[FakeKube, str]) -> tuple[FakeKube, str]:
    return fake_kube  # the root conftest's, by the name these tests were written with


@pytest.fixture
async def kube(fake: tuple[FakeKube, str]) -> AsyncIterator[KubeClient]:
    async with KubeClient(configuration(fake[1]), retry=KubeRetry(initial_wait=0.01, max_wait=0.05)) as k:
        yield k


@pytest.fixture
def new_lease() -> LeaseRecord:
    """Lease slurm/cp as its first holder ("a") writes it: acquired and renewed now, never moved."""
    now = dt.datetime.now(dt.UTC)
    return LeaseRecord(
        namespace="slurm",
        name="cp",
        holder="a",
        duration_seconds=15,
        acquire_time=now,
        renew_time=now,
        transitions=0,
        resource_version="",
    )
