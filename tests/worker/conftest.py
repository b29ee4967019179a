"""Fixtures shared by the worker tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sidecars.kube import KubeClient
from tests.fakekube import FakeKube, configuration


@pytest.fixture
async def kube(fake_kube: tuple[FakeKube, str]) -> AsyncIterator[tuple[FakeKube, KubeClient]]:
    """The fake API server and a client of ours talking to it, as the agent's naming code uses one."""
    fake, url = fake_kube
    async with KubeClient(configuration(url)) as client:
        yield fake, client
