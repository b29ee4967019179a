"""A slurmrestd that answers after the restart timeout is no failure: its container said it started
it again (on the staged set) and it has not refused, so config-sync waits for it, says so in /status,
and keeps the set once it answers. Rolling back then would be a guess, and the rollback's restart
would stop a slurmrestd that runs the new set well (the class fixed for slurmctld's late reconfigure,
configsync/apply). The container is played slow on purpose: it says it starts at once, but its
slurmrestd starts only once the test has seen config-sync pass its restart timeout (/status says it
waits; on the old code, the set rolled back)."""

from __future__ import annotations

import asyncio

import pytest

from sidecars.configsync.restd import answer, inflight
from sidecars.configsync.restd.drain import LATE
from sidecars.devcluster import DevCluster
from tests.configsync.restd.harness import DRAIN_SECONDS, RestdPod, restd_pod, slurm_conf_for
from tests.helpers import eventually

pytestmark = [pytest.mark.releases("slurm24", "slurm26"), pytest.mark.cluster(nodes=1, jwt=True)]

# short on purpose: slurmrestd's start waits until config-sync has passed it, whatever the load
RESTART_TIMEOUT_SECONDS = 1.0


async def test_a_slurmrestd_that_answers_after_the_restart_timeout_keeps_the_set(cluster: DevCluster) -> None:
    # slurmrestd starts once the test has seen /status say it waits for it (the new code) or the
    # set rolled back (the old code), whatever the load
    seen = asyncio.Event()

    def _past_the_timeout(_: RestdPod) -> bool:
        return seen.is_set()

    async with restd_pod(
        cluster, restart_timeout_seconds=RESTART_TIMEOUT_SECONDS, start_late=_past_the_timeout
    ) as pod:
        first = inflight.read(pod.port).listener
        conf = slurm_conf_for(cluster, pod.target) + "MessageTimeout=15\n"
        pod.conf.write({"slurm.conf": conf})
        waiting = await eventually(
            pod.status,
            lambda s: s["restd"]["why"] == LATE or bool(s["rejected"]),
            within=DRAIN_SECONDS,
            what="waiting for the late slurmrestd",
        )
        seen.set()
        assert not waiting["rejected"], waiting
        assert waiting["restd"]["serving"] is False, waiting
        st = await eventually(
            pod.status,
            lambda s: not s["pending"] and (s["applied"]["generation"] == 2 or bool(s["rejected"])),
            within=DRAIN_SECONDS,
            what="applied",
        )
        assert not st["rejected"], st
        assert st["applied"]["generation"] == 2, st
        assert st["restd"]["last_restart"]["ok"] is True, st
        assert (pod.target / "slurm.conf").read_text() == conf
        assert inflight.read(pod.port).listener not in (None, first)
        assert await answer.answers(pod.port, DRAIN_SECONDS)
        assert await pod.readyz() == 200
        # the slow slurmrestd answered config-sync before the harness's own start of it returned
        await eventually(lambda: len(pod.started), lambda n: n >= 2, within=DRAIN_SECONDS, what="started")
        assert len(pod.started) == 2, "slurmrestd was restarted again after it answered late"
