"""A storm of volume updates is batched: few reconfigures, and the last set is the one applied."""

from __future__ import annotations

import asyncio

import pytest

from sidecars.configsync.settings import Settings
from sidecars.devcluster import DevCluster
from tests.configsync.harness import config_sync, set_sha
from tests.settings import build


@pytest.mark.releases("slurm22")  # the batching is ours, not Slurm's: one release shows it
async def test_fifty_swaps_in_five_seconds_are_at_most_three_reconfigures(cluster: DevCluster) -> None:
    # the production defaults: a lone change waits 0.1 s, less than the swaps' spacing; only the
    # quiet time growing through the burst keeps this to a few reconfigures
    defaults = build(Settings, quick=False)
    async with config_sync(
        cluster,
        debounce_seconds=defaults.debounce_seconds,
        debounce_max_seconds=defaults.debounce_max_seconds,
    ) as sync:
        last: dict[str, bytes] = {}
        for i in range(1, 51):
            last = sync.good()
            last["slurm.conf"] = last["slurm.conf"].replace(b"MaxTime=INFINITE", f"MaxTime={i}".encode())
            sync.config.write(last)
            await asyncio.sleep(0.1)
        st = await sync.wait(set_sha(last), within=30.0)
        assert (await cluster.client().partitions())[0].max_time_minutes == 50
        reconfigures = await sync.metric(
            "slurm_sidecars_slurm_commands_total", command="scontrol reconfigure", result="ok"
        )
        assert 1 <= reconfigures <= 3
        assert st["applied"]["generation"] == 1 + reconfigures
