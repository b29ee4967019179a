"""config-sync's `GET /v1/plans`, what the web page reads: always served (with the viewer's
credential), saying when plans are not, bounded whatever a plan listed; and config-sync refusing
one token for both viewer and operator (the page's credential would then start plans)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from sidecars.cli import self_argv
from sidecars.configsync.plans.api import JOBS_LISTED, add_routes, summary
from sidecars.runtime import http, process

pytestmark = pytest.mark.timeout(60)


async def test_without_the_operators_credential_plans_are_said_not_served() -> None:
    app = web.Application()
    add_routes(app, None)
    async with http.serve(app, "127.0.0.1", 0) as port, aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{port}/v1/plans") as r:
            assert r.status == 200 and await r.json() == {"served": False, "limit": 0, "plans": []}
        async with s.post(f"http://127.0.0.1:{port}/v1/plan", json={"files": []}) as r:
            assert r.status == 404  # not served: nothing to plan with
        async with s.get(f"http://127.0.0.1:{port}/v1/openapi.json") as r:
            paths = (await r.json())["paths"]
    assert "/v1/plans" in paths and "/v1/plan" not in paths


def _answer(jobs: int) -> dict[str, Any]:
    return {
        "verdict": "held-for-jobs",
        "exit_code": 3,
        "sha256": "c" * 64,
        "live_sha256": "a" * 64,
        "reason": "it would end jobs",
        "jobs": [{"job_id": i, "why": "its partition is removed"} for i in range(1, jobs + 1)],
        "restart": [],
        "files": [{"name": "slurm.conf", "change": "modified", "diff": "-PartitionName=p2\n", "note": ""}],
        "checks": ["x"],
        "not_checked": [],
        "dry_run_seconds": 1.0,
    }


def test_a_plan_is_listed_without_its_diff_and_with_its_jobs_counted() -> None:
    listed = summary(_answer(10_000))
    assert listed["jobs"] == list(range(1, JOBS_LISTED + 1)) and listed["jobs_total"] == 10_000
    assert listed["files"] == [{"name": "slurm.conf", "change": "modified"}]  # never a diff
    assert "diff" not in str(listed) and listed["verdict"] == "held-for-jobs" and listed["at"]


async def test_one_token_for_viewer_and_operator_is_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("the-same-token-for-both-0123456789\n")
    token.chmod(0o600)
    (tmp_path / "src").mkdir()
    argv = self_argv(
        "config-sync",
        "--source",
        str(tmp_path / "src"),
        "--target",
        str(tmp_path / "etc"),
        "--http",
        "127.0.0.1:0",
        "--viewer-token-file",
        str(token),
        "--operator-token-file",
        str(token),
    )
    done = await process.run(argv, timeout=30)
    assert done.returncode == 2, done.stderr
    assert b"must differ from --viewer-token-file" in done.stderr, done.stderr
