"""config-sync's `--watch-token`: tokens that slurmrestd's callers present, signed by a real slurmctld
(`scontrol token`), each read from its file: the time left is a metric per file, and a token with
less than `--token-warn-seconds` left, expired, or unreadable is one Warning Event (a new token in
the file is a new one). The token itself is in no Event."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sidecars.configsync import tokenwatch
from sidecars.configsync.tokenwatch import TokenWatch, TokenWatchSettings
from sidecars.devcluster import DevCluster
from sidecars.devcluster import restd as devrestd
from tests.configsync.harness import Sync, config_sync
from tests.helpers import RecordingEvents

pytestmark = [pytest.mark.releases("slurm24", "slurm26"), pytest.mark.cluster(nodes=1, jwt=True)]

WARN_SECONDS = 3600.0
CHECK_SECONDS = 0.2
SETTLE_SECONDS = 60.0  # many checks' worth on a loaded machine


def _write(path: Path, text: str) -> None:
    path.write_text(text + "\n")
    path.chmod(0o600)


async def _metric_until(sync: Sync, file: Path, ok: Callable[[float], bool], what: str) -> float:
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        text = await sync.metrics()
        values = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(f'{tokenwatch.METRIC}{{file="{file}"}}')
        ]
        if values and ok(values[0]):
            return values[0]
        assert time.monotonic() < deadline, f"{what}: {tokenwatch.METRIC} for {file} is {values}"
        await asyncio.sleep(CHECK_SECONDS)


async def _event_until(sync: Sync, reason: str, file: Path) -> list[str]:
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        said = [m for r, m, t in sync.events.events if r == reason and str(file) in m and t == "Warning"]
        if said:
            return said
        assert time.monotonic() < deadline, f"no {reason} for {file}: {sync.events.events}"
        await asyncio.sleep(CHECK_SECONDS)


async def test_a_token_near_its_end_is_warned_once_and_its_time_left_is_a_metric(
    cluster: DevCluster, tmp_path: Path
) -> None:
    soon, later = tmp_path / "soon", tmp_path / "later"
    soon_token = await devrestd.token(cluster, lifespan_seconds=600)
    _write(soon, soon_token)
    _write(later, await devrestd.token(cluster, lifespan_seconds=7200))
    watch = TokenWatchSettings(files=(soon, later), warn_seconds=WARN_SECONDS, check_seconds=CHECK_SECONDS)
    async with config_sync(cluster, token_watch=watch) as sync:
        left = await _metric_until(sync, soon, lambda v: 0 < v <= 600, "a 600 s token")
        await _metric_until(sync, later, lambda v: WARN_SECONDS < v <= 7200, "a 7200 s token")
        (message,) = await _event_until(sync, tokenwatch.EXPIRING, soon)
        assert "(user nobody) expires in" in message and soon_token not in message, message
        assert not [m for _, m, _ in sync.events.events if str(later) in m]
        # read again and again: still one Event for that token
        await _metric_until(sync, soon, lambda v: v < left, "the time left going down")
        assert len([r for r, m, _ in sync.events.events if str(soon) in m]) == 1

        # the refresh lands (the Secret is rewritten): the metric follows, nothing more is said
        _write(soon, await devrestd.token(cluster, lifespan_seconds=7200))
        await _metric_until(sync, soon, lambda v: v > WARN_SECONDS, "the refreshed token")
        # a file that holds no token any more
        _write(later, "not-a-token")
        (message,) = await _event_until(sync, tokenwatch.UNREADABLE, later)
        assert "holds no usable token" in message
        await _metric_until(sync, later, math.isnan, "an unreadable token")
        assert len([r for r, m, _ in sync.events.events if str(soon) in m]) == 1


async def test_an_expired_token_says_how_long_ago(cluster: DevCluster, tmp_path: Path) -> None:
    token = await devrestd.token(cluster, lifespan_seconds=60)
    _write(tmp_path / "t", token)
    events = RecordingEvents()
    settings = TokenWatchSettings(files=(tmp_path / "t",), warn_seconds=WARN_SECONDS)
    # the clock 5 minutes on: the token expired 4 minutes ago (tokens carry wall-clock epochs)
    watch = TokenWatch(settings, CollectorRegistry(), events, clock=lambda: time.time() + 300)
    (reading,) = await watch.check_once()
    # 240 s ago, less what passed since the token was made (seconds on a loaded machine)
    assert reading.left_seconds is not None and -290 <= reading.left_seconds <= -239, reading
    assert reading.problem.startswith("expired 4m") and reading.user == "nobody", reading
    assert events.reasons() == [tokenwatch.EXPIRING]
    await watch.check_once()
    assert events.reasons() == [tokenwatch.EXPIRING]  # once
