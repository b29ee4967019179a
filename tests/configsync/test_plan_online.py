"""`plan --config-sync URL` on real Slurm: config-sync plans against the live set and state, behind
its apply queue, one plan at a time, for the operator only, and changes nothing."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sidecars.cli import self_argv
from sidecars.devcluster import DevCluster
from sidecars.runtime.waits import within
from tests.configsync.harness import Sync, config_sync
from tests.configsync.test_dry_run import KILLER, without_p2
from tests.configsync.test_plan import reconfigures

pytestmark = [
    pytest.mark.cluster(nodes=2, extra_conf="PartitionName=p2 Nodes=n2 State=UP"),
    pytest.mark.timeout(120),
]

TOKEN = "operator-token-for-the-plan-tests-0123456789"


async def plan_command(
    sync: Sync, files: dict[str, bytes], tmp: Path, *args: str
) -> tuple[int, dict[str, Any], str]:
    """The command as CI runs it: the candidate in a directory, the answer as JSON."""
    where = tmp / f"candidate-{os.urandom(3).hex()}"
    where.mkdir()
    for name, data in files.items():
        (where / name).write_bytes(data)
    token = tmp / "token"
    token.write_text(TOKEN)
    url = f"http://127.0.0.1:{sync.running.port}"
    proc = await asyncio.create_subprocess_exec(
        *self_argv(
            "plan",
            "-f",
            str(where),
            "--config-sync",
            url,
            "--token-file",
            str(token),
            "--output",
            "json",
            *args,
        ),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await within(proc.communicate(), 90)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, json.loads(out) if out.strip() else {}, err.decode()


def request(files: dict[str, bytes]) -> dict[str, Any]:
    return {"files": [{"name": n, "data": base64.b64encode(d).decode()} for n, d in files.items()]}


@pytest.mark.per_release("the dry run is that release's slurmctld: its fatal and its words are its own")
async def test_a_fatal_set_is_refused_and_the_live_cluster_is_untouched(
    cluster: DevCluster, tmp_path: Path
) -> None:
    async with config_sync(cluster, operator_token=TOKEN) as sync:
        before, count = sync.target_sha(), await reconfigures(cluster)
        bad = {**sync.good(), "slurm.conf": sync.good()["slurm.conf"] + KILLER}
        code, answer, err = await plan_command(sync, bad, tmp_path)
        assert code == 1 and answer["verdict"] == "refused", err
        assert "fatal: Invalid configured licenses: foo:abc" in answer["reason"]
        assert answer["live_sha256"] == before
        code, same, err = await plan_command(sync, sync.good(), tmp_path)
        assert (code, same["verdict"]) == (0, "no-change"), err
        assert sync.target_sha() == before and await reconfigures(cluster) == count
        assert (
            await sync.metric(
                "slurm_sidecars_slurm_commands_total", command="scontrol reconfigure", result="ok"
            )
            == 0
        )
        assert (await sync.status())["rejected"] is None  # a plan is no change config-sync judged
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{sync.running.port}/v1/plans") as r:
            recent = (await r.json())["plans"]  # for the web page, newest first
        assert [(p["verdict"], p["sha256"]) for p in recent] == [
            ("no-change", before),
            ("refused", answer["sha256"]),
        ]
        assert "Invalid configured licenses" in recent[1]["reason"]


async def test_a_busy_partition_removed_is_held_for_its_job(cluster: DevCluster, tmp_path: Path) -> None:
    job = await cluster.sbatch("-p", "p2", wrap="sleep 600")
    await cluster.wait_job(job, "RUNNING")
    async with config_sync(cluster, operator_token=TOKEN) as sync:
        await cluster.job_state_saved(job)  # the throwaway loads only what was saved
        code, answer, err = await plan_command(sync, without_p2(sync.good()), tmp_path)
        assert code == 3 and answer["verdict"] == "held-for-jobs", err
        assert [j["job_id"] for j in answer["jobs"]] == [job]
    assert (await cluster.wait_job(job, "RUNNING")).state == "RUNNING"


async def test_the_operator_only_one_at_a_time_behind_the_apply_queue_and_documented(
    cluster: DevCluster,
) -> None:
    async with config_sync(cluster, operator_token=TOKEN) as sync:
        url = f"http://127.0.0.1:{sync.running.port}"
        body = request(sync.good())
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{url}/v1/plan", json=body) as r:
                assert r.status == 401
            async with s.post(f"{url}/v1/plan", json=body, headers={"Authorization": "Bearer wrong"}) as r:
                assert r.status == 401
            auth = {"Authorization": f"Bearer {TOKEN}"}
            async with s.post(
                f"{url}/v1/plan", json={"files": [{"name": "../x", "data": ""}]}, headers=auth
            ) as r:
                assert r.status == 400 and "not a valid file name" in (await r.json())["error"]
            async with s.get(f"{url}/v1/openapi.json") as r:
                spec = await r.json()
            assert set(spec["paths"]["/v1/plan"]["post"]["responses"]) == {"200", "400", "401", "429", "503"}

            async def post() -> int:
                async with s.post(f"{url}/v1/plan", json=body, headers=auth) as r:
                    await r.read()
                    return r.status

            # a change being applied holds the queue: the first plan waits behind it, the second is 429
            async with sync.service.queue:
                both = [asyncio.create_task(post()), asyncio.create_task(post())]
                done, waiting = await asyncio.wait(both, timeout=30, return_when=asyncio.FIRST_COMPLETED)
                assert [t.result() for t in done] == [429] and len(waiting) == 1
            assert await within(waiting.pop(), 60) == 200
