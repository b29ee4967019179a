"""Every daemon measures how late its event loop runs (`slurm_sidecars_event_loop_lag_seconds`) and
fails `/livez` naming the check once the loop lagged past `--loop-lag-bound-seconds`, so that the
kubelet restarts a sidecar whose loop something holds (issue 33: a 1 MiB line held config-sync's
loop for minutes while it looked alive)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from sidecars.devcluster import DevCluster
from sidecars.runtime import looplag
from sidecars.runtime.looplag import LoopLag, LoopLagSettings
from tests.configsync.harness import config_sync
from tests.controlplane.conftest import control_plane
from tests.helpers import eventually
from tests.worker.agents import http_get, running_agent, settings_for

BOUND = LoopLagSettings(bound_seconds=0.3)
# the loop held this long: its wake is then overdue by at least HOLD - INTERVAL (a loaded machine
# only makes the lag longer), well past the bound
HOLD = BOUND.bound_seconds + 1.0 + looplag.INTERVAL_SECONDS


def hold_the_loop() -> None:
    """What a CPU-bound step on the loop does: nothing else runs until it ends."""
    end = time.monotonic() + HOLD
    while time.monotonic() < end:
        pass


async def test_a_held_loop_shows_in_the_gauge_and_fails_the_check() -> None:
    registry = CollectorRegistry()
    lag = LoopLag(registry, BOUND)
    task = asyncio.create_task(lag.run(), name=looplag.TASK)
    try:
        await eventually(lambda: lag.ticks > 0, what="a first tick")
        hold_the_loop()
        await eventually(lambda: not lag.check().ok, what="the check failed")
        assert "the event loop ran" in lag.check().detail and "(bound 0.3s)" in lag.check().detail
        seen = await eventually(
            lambda: registry.get_sample_value(looplag.METRIC),
            lambda v: v is not None and v >= HOLD - looplag.INTERVAL_SECONDS,
            what="the gauge",
        )
        assert seen is not None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def held_then_refused(get: Callable[[str], Awaitable[tuple[int, Any]]]) -> None:
    """Hold the daemon's loop past its bound; its /livez then fails naming the check, and its
    metrics show the lag."""
    await eventually(lambda: get("/metrics"), lambda r: looplag.METRIC in str(r[1]), what="the metric")
    hold_the_loop()
    _, body = await eventually(lambda: get("/livez"), lambda r: r[0] == 503, what="livez 503")
    assert not body["checks"][looplag.CHECK]["ok"], body
    assert "the event loop ran" in body["checks"][looplag.CHECK]["detail"]


@pytest.mark.cluster(nodes=1)
@pytest.mark.releases("slurm26")  # the loop is ours, not Slurm's: one release shows it
async def test_config_sync_fails_livez_on_a_held_loop(cluster: DevCluster) -> None:
    async with config_sync(cluster, loop_lag=BOUND) as sync:

        async def get(path: str) -> tuple[int, Any]:
            url = f"http://127.0.0.1:{sync.running.port}{path}"
            async with aiohttp.ClientSession() as s, s.get(url) as r:
                return r.status, await (r.json() if path == "/livez" else r.text())

        await held_then_refused(get)


@pytest.mark.cluster(nodes=1)
@pytest.mark.releases("slurm26")
async def test_the_worker_fails_livez_on_a_held_loop(cluster: DevCluster, sockdir: Path) -> None:
    async with running_agent(cluster, settings_for(cluster, sockdir, loop_lag=BOUND)) as agent:
        await held_then_refused(lambda path: http_get(agent, path))


@pytest.mark.cluster(nodes=1)
@pytest.mark.releases("slurm26")
async def test_the_control_plane_fails_livez_on_a_held_loop(cluster: DevCluster) -> None:
    async with control_plane(cluster, loop_lag=BOUND) as cp:

        async def get(path: str) -> tuple[int, Any]:
            async with cp.session.get(cp.url + path) as r:
                return r.status, await (r.json() if path == "/livez" else r.text())

        await held_then_refused(get)
