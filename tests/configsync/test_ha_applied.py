"""HA controllers: a change counts as applied only when every controller that is up runs it, or,
for a backup that is down, when its directory holds it (what it reads at its next start). Until
then the generation is "staging"; a peer that never catches up makes it "not everywhere". Both
show in /status, /history, the Events and the metrics (configsync/ha/rollout.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from sidecars.devcluster import DevCluster
from sidecars.devcluster.ports import lease_ports
from sidecars.runtime.http import serve
from sidecars.slurm import SlurmClient
from tests.configsync.hapair import HA_SPEC, Pod, ha_pair, with_min_job_age
from tests.configsync.harness import set_sha

pytestmark = [
    pytest.mark.releases("slurm24", "slurm26"),
    pytest.mark.cluster(**HA_SPEC),
    pytest.mark.timeout(300),
]


def applies(pod: Pod, result: str) -> float:
    return pod.registry.get_sample_value("slurm_sidecars_config_applies_total", {"result": result}) or 0.0


def newest(pod: Pod) -> dict[str, Any]:
    return dict(pod.service.history_view()["generations"][0])


def reasons(pod: Pod, reason: str) -> list[str]:
    return [message for r, message, _ in pod.events.events if r == reason]


def outcome_is(sha: str, outcome: str) -> Any:
    def done(st: dict[str, Any]) -> bool:
        a = st["applied"]
        return bool(a and a["sha256"] == sha and a["outcome"] == outcome and not st["pending"])

    return done


@pytest.mark.per_release("each release's backup start on the staged set and its answers meanwhile")
async def test_a_backup_down_during_a_change_counts_once_its_directory_holds_it(cluster: DevCluster) -> None:
    async with ha_pair(cluster, ha_catch_up_seconds=600) as pair:
        a = pair.pods["ctld-a"]
        await pair.all_hold(set_sha(pair.good()), within=60)

        # ctld-b's slurmctld down, its config-sync up: its directory takes the set at once, and
        # that is what ctld-b reads at its next start, so the change is applied at once
        await cluster.kill_controller("ctld-b")
        files = with_min_job_age(pair.good(), 181)
        pair.config.write(files)
        st = await a.service.wait_until(outcome_is(set_sha(files), "applied"), 60)
        assert st["ha"]["rollout"]["state"] == "everywhere" and st["ha"]["rollout"]["behind"] == []
        assert pair.pods["ctld-b"].target_sha() == set_sha(files)
        assert pair.pods["ctld-b"].service.status()["ha"]["role"] == "down"
        assert newest(a)["outcome"] == "applied" and newest(a)["generation"] == 2
        assert applies(a, "applied") == 1

        # the whole pod lost (its config-sync too): the writer applies the next change, and it is
        # applied on ctld-a, staging on ctld-b, until ctld-b's pod is back and has it
        await pair.stop("ctld-b")
        files = with_min_job_age(files, 182)
        pair.config.write(files)
        sha = set_sha(files)
        st = await a.service.wait_until(outcome_is(sha, "staging"), 60)
        assert await _min_job_age(cluster) == "182"  # the primary runs it
        rollout = st["ha"]["rollout"]
        assert rollout["state"] == "staging" and len(rollout["behind"]) == 1
        assert "unreachable" in rollout["behind"][0], rollout
        assert "staging on" in rollout["words"], rollout
        entry = newest(a)
        assert entry["outcome"] == "staging" and entry["generation"] == 3 and entry["sha256"] == sha
        assert any("staging on" in m for m in reasons(a, "ConfigStaging")), a.events.events
        assert applies(a, "applied") == 1  # not counted applied while ctld-b's directory lacks it
        assert a.registry.get_sample_value("slurm_sidecars_config_ha_rollout", {"state": "staging"}) == 1
        assert pair.pods["ctld-b"].target_sha() != sha

        # a next change while ctld-b's pod is still away: the one staging is superseded (no
        # Warning: a burst is no failure), and the new one stages in its place
        files = with_min_job_age(files, 183)
        pair.config.write(files)
        sha = set_sha(files)
        await a.service.wait_until(outcome_is(sha, "staging"), 60)
        assert await _min_job_age(cluster) == "183"
        gens = {g["generation"]: g for g in a.service.history_view()["generations"]}
        assert gens[3]["outcome"] == "superseded" and "replaced by generation 4" in str(gens[3]["reason"])
        assert gens[4]["outcome"] == "staging"
        assert applies(a, "superseded") == 1 and not reasons(a, "ConfigNotEverywhere")

        # ctld-b's pod back, its slurmctld still down: its config-sync stages the set, and only
        # now does the change count as applied on the writer
        b = await pair.start("ctld-b")
        st = await a.service.wait_until(outcome_is(sha, "applied"), 60)
        assert b.target_sha() == sha
        assert newest(a)["outcome"] == "applied" and newest(a)["generation"] == 4
        assert "every controller holds it" in str(newest(a)["reason"])
        assert any("generation 4" in m for m in reasons(a, "ConfigApplied")), a.events.events
        assert applies(a, "applied") == 2
        assert a.registry.get_sample_value("slurm_sidecars_config_ha_rollout", {"state": "everywhere"}) == 1

        # ctld-b's next start reads it: in control once ctld-a is lost, it runs the set its pod staged
        await cluster.start_controller("ctld-b")
        await cluster.kill_controller("ctld-a")
        await cluster.wait_primary("ctld-b", timeout=90)
        assert await _min_job_age(cluster) == "183"


@contextlib.asynccontextmanager
async def junk_peer() -> AsyncIterator[str]:
    """A 'peer' that answers its /status with something that is not a config-sync's."""

    async def answer(_: web.Request) -> web.Response:
        return web.Response(text="<html>hello</html>")

    app = web.Application()
    app.router.add_get("/status", answer)
    async with serve(app, "127.0.0.1", 0) as port:
        yield f"http://127.0.0.1:{port}"


async def test_a_peer_that_answers_junk_or_nothing_leaves_the_change_not_everywhere(
    cluster: DevCluster,
) -> None:
    with lease_ports(1) as lease:  # leased, never bound: nothing answers there
        silent = f"http://127.0.0.1:{lease.ports[0]}"
        async with (
            junk_peer() as junk,
            ha_pair(cluster, more_peers={"ctld-a": (junk, silent)}, ha_catch_up_seconds=3) as pair,
        ):
            a, b = pair.pods["ctld-a"], pair.pods["ctld-b"]
            files = with_min_job_age(pair.good(), 191)
            pair.config.write(files)
            sha = set_sha(files)
            # ctld-b, whose only peer is ctld-a, holds it with ctld-a: applied there
            await b.service.wait_until(outcome_is(sha, "applied"), 60)
            # ctld-a runs it and ctld-b staged it, but two of its peers never said they hold it
            st = await a.service.wait_until(outcome_is(sha, "not_everywhere"), 60)
            assert await _min_job_age(cluster) == "191"
            behind = st["ha"]["rollout"]["behind"]
            assert len(behind) == 2, behind
            assert any(junk in w and "not JSON" in w for w in behind), behind
            assert any(silent in w and "unreachable" in w for w in behind), behind
            assert not st["ha"]["in_step"]
            entry = newest(a)
            assert entry["outcome"] == "not_everywhere" and "after 3s" in str(entry["reason"]), entry
            [warning] = reasons(a, "ConfigNotEverywhere")
            assert "generation 2" in warning and junk in warning and silent in warning
            assert ("ConfigNotEverywhere", warning, "Warning") in a.events.events
            assert applies(a, "not_everywhere") == 1 and applies(a, "applied") == 0
            assert (
                a.registry.get_sample_value("slurm_sidecars_config_ha_rollout", {"state": "not everywhere"})
                == 1
            )


async def _min_job_age(cluster: DevCluster) -> str:
    """MinJobAge as the controller in control reports it (its clients fall through a standby)."""
    return (await SlurmClient(env=cluster.env).show_config())["MinJobAge"].split()[0]
