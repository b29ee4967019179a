"""HA controllers, one config-sync per controller pod: the one beside the controller in control
applies, the other stages the set once the writer verified it, and a takeover then runs it."""

from __future__ import annotations

import aiohttp
import pytest

from sidecars.devcluster import DevCluster
from sidecars.slurm import SlurmClient
from tests.configsync.hapair import HA_SPEC, ha_pair, with_min_job_age
from tests.configsync.harness import set_sha

pytestmark = [pytest.mark.releases("slurm22", "slurm24", "slurm26"), pytest.mark.cluster(**HA_SPEC)]


async def _min_job_age(cluster: DevCluster) -> str:
    """MinJobAge as the controller in control reports it (its clients fall through a standby)."""
    return (await SlurmClient(env=cluster.env).show_config())["MinJobAge"].split()[0]


@pytest.mark.per_release("each release's takeover onto the staged set")
async def test_a_change_reaches_both_controllers(cluster: DevCluster) -> None:
    async with ha_pair(cluster) as pair:
        a, b = pair.pods["ctld-a"], pair.pods["ctld-b"]
        st_a, st_b = a.service.status(), b.service.status()
        assert st_a["ha"]["role"] == "in control" and st_a["ha"]["writer"]
        assert st_b["ha"]["role"] == "standby" and not st_b["ha"]["writer"]
        # a backup in standby is healthy: ready, not a failure, and its readiness says what it is
        assert b.service.ready and st_b["rejected"] is None
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{b.running.port}/readyz") as r:
            assert r.status == 200
            ready = await r.json()
        assert ready["checks"]["ha"]["ok"] and ready["checks"]["ha"]["detail"].startswith("standby")

        files = with_min_job_age(pair.good(), 171)
        pair.config.write(files)
        sha = set_sha(files)
        await pair.all_hold(sha, within=60)
        assert await _min_job_age(cluster) == "171"
        # only the writer reconfigured; the standby staged the verified set and says so
        assert a.commands("scontrol reconfigure") == 1
        assert b.commands("scontrol reconfigure") == 0
        assert a.target_sha() == b.target_sha() == sha
        st_a, st_b = a.service.status(), b.service.status()
        assert st_a["ha"]["in_step"] and st_b["ha"]["in_step"]
        assert st_b["applied"]["generation"] == 2
        assert b.registry.get_sample_value("slurm_sidecars_config_ha_staged_total") == 1
        assert any("staged" in message and "ctld-a" in message for _, message, _ in b.events.events)

        # the backup, taking control, reads its own directory: the new set
        await cluster.takeover()
        assert await _min_job_age(cluster) == "171"
        # and it is the writer now: the next change is applied through it
        files = with_min_job_age(files, 172)
        pair.config.write(files)
        await pair.all_hold(set_sha(files), within=60)
        assert await _min_job_age(cluster) == "172"
        assert b.service.status()["ha"]["writer"]
        assert b.commands("scontrol reconfigure") == 1
        # ctld-a was shut down by the takeover: its pod's directory holds the set it will start on
        assert a.target_sha() == set_sha(files)
        assert a.service.status()["ha"]["role"] == "down"
