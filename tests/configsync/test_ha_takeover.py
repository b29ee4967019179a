"""A takeover at any instant of an apply ends with both controllers on one set (the new one or the
last known good one), the controller in control running it, and the running job untouched."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from sidecars.devcluster import DevCluster
from sidecars.slurm import SlurmClient
from tests.configsync.hapair import (
    HA_SPEC,
    Pair,
    conf_value,
    ha_pair,
    takeover_now,
    with_min_job_age,
)
from tests.configsync.harness import set_sha
from tests.helpers import eventually

pytestmark = [
    pytest.mark.releases("slurm22", "slurm24", "slurm26"),
    pytest.mark.cluster(**HA_SPEC),
    pytest.mark.timeout(240),
]


class Armed:
    """A checkpoint that takes control away once, at one step of the next apply."""

    def __init__(self, cluster: DevCluster, step: str) -> None:
        self.cluster, self.step, self.armed, self.fired = cluster, step, False, False

    def __call__(self, step: str) -> None:
        if self.armed and step == self.step and not self.fired:
            self.fired = True
            takeover_now(self.cluster)


async def _takeover_once_reconfigured(pair: Pair) -> None:
    """During verification: once the writer's `scontrol reconfigure` returned."""
    a = pair.pods["ctld-a"]
    deadline = time.monotonic() + 60
    while a.commands("scontrol reconfigure") < 1:
        assert time.monotonic() < deadline, "the writer never reconfigured"
        await asyncio.sleep(0.02)
    await pair.cluster.takeover()


@pytest.mark.parametrize("instant", ["before_swap", "after_swap", "verifying"])
@pytest.mark.per_release(
    "each release's takeover and handback (26.05 freezes ~30 s), met at each instant of an apply"
)
async def test_a_takeover_during_an_apply_leaves_one_set(cluster: DevCluster, instant: str) -> None:
    steps = {"before_swap": "written", "after_swap": "linked"}
    armed = Armed(cluster, steps.get(instant, ""))
    checkpoints: dict[str, Callable[[str], None]] = {"ctld-a": armed}
    async with ha_pair(cluster, checkpoints=checkpoints) as pair:
        job = await cluster.sbatch("-N", "1", wrap="sleep 120")
        await cluster.wait_job(job, "RUNNING", timeout=30)
        await cluster.job_state_saved(job)  # a takeover recovers only what was saved

        old = pair.good()
        new = with_min_job_age(old, 181)
        armed.armed = True
        pair.config.write(new)
        if instant == "verifying":
            await _takeover_once_reconfigured(pair)
        else:
            await cluster.wait_primary("ctld-b", timeout=60)
            assert armed.fired

        sha = await pair.one_set(within=120)
        assert sha in (set_sha(new), set_sha(old))
        ran = new if sha == set_sha(new) else old
        config = await SlurmClient(env=cluster.env).show_config()
        assert config["MinJobAge"].split()[0] == conf_value(ran, "MinJobAge")
        # control moved and stayed: ctld-a was shut down, its pod holds the set it will start on
        assert await cluster.primary() == "ctld-b"
        # each config-sync learns its controller's role at its next poll: wait for that, not Slurm's
        await eventually(
            lambda: (
                pair.pods["ctld-b"].service.status()["ha"]["writer"],
                pair.pods["ctld-a"].service.status()["ha"]["role"],
            ),
            lambda seen: seen == (True, "down"),
            within=300 * pair.settings["ctld-b"].ha_poll_seconds,  # its poll, generously
            what="ctld-b's config-sync the writer, ctld-a's down",
        )
        # the job never noticed: still running, not requeued
        jobs = {j.job_id: j for j in await SlurmClient(env=cluster.env).jobs()}
        assert jobs[job].state == "RUNNING", jobs[job]
        await cluster.scancel(job)
