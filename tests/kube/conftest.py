from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sidecars.kube import KubeClient
from sidecars.kube.client import KubeRetry
from tests.fakekube import FakeKube, configuration


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeKube, str]]:
    f = FakeKube()
    async with f.serving() as url:
        yield f, url


@pytest.fixture
async def kube(fake: tuple[FakeKube, str]) -> AsyncIterator[KubeClient]:
    async with KubeClient(configuration(fake[1]), retry=KubeRetry(initial_wait=0.01, max_wait=0.05)) as k:
        yield k
