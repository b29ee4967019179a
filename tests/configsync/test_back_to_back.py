"""A change that arrives while the one before settles does not wait for that settle period."""

from __future__ import annotations

import asyncio
import time

import pytest

from sidecars.devcluster import DevCluster
from tests.configsync.harness import config_sync, set_sha

SETTLE = 60.0  # far beyond anything else this test waits for


def max_time(files: dict[str, bytes], minutes: int) -> dict[str, bytes]:
    return {
        **files,
        "slurm.conf": files["slurm.conf"].replace(b"MaxTime=INFINITE", f"MaxTime={minutes}".encode()),
    }


@pytest.mark.releases("slurm26")  # the settle period is ours, not Slurm's: one release shows it
async def test_a_later_change_cuts_the_earlier_ones_settle_short(cluster: DevCluster) -> None:
    client = cluster.client()

    async def reported() -> int | None:
        return (await client.partitions())[0].max_time_minutes

    async with config_sync(cluster, settle_seconds=SETTLE) as sync:
        first, second = max_time(sync.good(), 41), max_time(sync.good(), 42)
        sync.config.write(first)
        await cluster._poll(reported, lambda m: m == 41, 30, "the first change on slurmctld")
        await asyncio.sleep(1.0)  # a second apart, as someone editing by hand
        written = time.monotonic()
        sync.config.write(second)
        # slurmctld has the second change long before the first one's settle period could end
        await cluster._poll(reported, lambda m: m == 42, SETTLE / 2, "the second change on slurmctld")
        assert time.monotonic() - written < SETTLE / 2
        # the first was counted applied (its values showed and slurmctld answered) when the second came
        assert await sync.metric("slurm_sidecars_config_applies_total", result="applied") >= 1
        assert (await sync.status())["applied"]["sha256"] == set_sha(first)
