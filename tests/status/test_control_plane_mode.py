"""`status --control-plane`: the fleet as the control plane serves it, over its real /v1 contract."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.status.invocation import status
from tests.status.servers import SEEN_KEY, config_sync_app, control_plane_app, serving

TOKEN = "t0ken-for-tests-2b7e9d0c4f1a8e63"
WRONG = "wrong-9f1e7c3a5b2d8e0f4a6c1b7d3e5f"  # well formed, and not the one the server holds


def _nodes(now: int) -> list[dict[str, object]]:
    return [
        {
            "name": "gpu-a",
            "state": "MIXED",
            "flags": ["DRAIN"],
            "reason": "slurm-sidecars: scale-in",
            "jobs": [41, 42],
            "busy_until": now + 3700,
        },
        {"name": "gpu-b", "state": "IDLE", "flags": [], "reason": None, "jobs": [], "busy_until": None},
        {
            "name": "gpu-c",
            "state": "ALLOCATED",
            "flags": [],
            "reason": None,
            "jobs": [43],
            "busy_until": now + 60,
        },
        {
            "name": "gpu-d",
            "state": "IDLE",
            "flags": ["DRAIN"],
            "reason": "bad DIMM",
            "jobs": [],
            "busy_until": None,
        },
    ]


def _token(tmp_path: Path, text: str = TOKEN) -> str:
    path = tmp_path / "token"
    path.write_text(text + "\n")
    return str(path)


async def test_shows_nodes_jobs_drains_and_scale_in_order(tmp_path: Path) -> None:
    app = control_plane_app(TOKEN, _nodes(int(time.time())), ["gpu-b", "gpu-d", "gpu-c", "gpu-a"])
    async with serving(app) as url:
        r = await status("--control-plane", url, "--token-file", _token(tmp_path))
    assert r.code == 0, r.err
    assert r.err == ""
    lines = r.out.splitlines()
    assert lines[0] == "4 nodes (1 allocated, 2 idle, 1 mixed); 1 draining, 1 drained; jobs: 3 running"
    row = next(line for line in lines if line.startswith("gpu-a "))
    assert row.split()[:4] == ["gpu-a", "MIXED", "DRAIN", "41,42"]
    assert "(in 1h01m" in row and "slurm-sidecars: scale-in" in row
    drains = lines[lines.index("DRAINS IN PROGRESS") + 1]
    # gpu-a still runs jobs under DRAIN; gpu-d is drained and idle, so it is not "in progress"
    assert drains.startswith("gpu-a: waiting for job(s) 41,42, expected done ")
    assert drains.endswith("(reason: slurm-sidecars: scale-in)")
    assert not any(line.startswith("gpu-d:") for line in lines)
    jobs = lines[lines.index("JOBS (running, as the control plane sees them)") + 1 :]
    assert jobs[1].split() == ["41", "gpu-a"] and jobs[3].split() == ["43", "gpu-c"]
    order = lines[lines.index("SCALE-IN ORDER (first to go first)") + 1]
    assert order == "1.gpu-b 2.gpu-d 3.gpu-c 4.gpu-a"
    # every /v1 call carried the bearer token
    assert {auth for path, auth in app[SEEN_KEY] if path.startswith("/v1/")} == {f"Bearer {TOKEN}"}


async def test_token_from_environment(tmp_path: Path) -> None:
    app = control_plane_app(TOKEN, _nodes(int(time.time())), [])
    async with serving(app) as url:
        env = dict(os.environ, SIDECARS_CONTROL_PLANE=url, SIDECARS_TOKEN_FILE=_token(tmp_path))
        r = await status(env=env)
    assert r.code == 0, r.err
    assert "no node to remove" in r.out


async def test_wrong_token_is_refused_with_exit_1(tmp_path: Path) -> None:
    async with serving(control_plane_app(TOKEN, [], [])) as url:
        r = await status("--control-plane", url, "--token-file", _token(tmp_path, WRONG))
    assert r.code == 1
    assert "HTTP 401: the token was refused" in r.err
    assert "(unavailable: the control plane did not answer)" in r.out


async def test_unreachable_control_plane_exits_1(tmp_path: Path) -> None:
    async with serving(control_plane_app(TOKEN, [], [])) as url:
        pass  # the port was ours a moment ago and nothing listens on it now
    r = await status("--control-plane", url, "--token-file", _token(tmp_path), "--timeout-seconds", "2")
    assert r.code == 1
    assert r.err.startswith(f"slurm-sidecars status: control plane: {url}/v1/nodes: unreachable")


async def test_malformed_answer_is_named(tmp_path: Path) -> None:
    async with serving(control_plane_app(TOKEN, [{"state": "IDLE"}], [])) as url:  # type: ignore[list-item]
        r = await status("--control-plane", url, "--token-file", _token(tmp_path))
    assert r.code == 1
    assert "/v1/nodes: unexpected answer" in r.err


async def test_config_generation_and_last_rejection(tmp_path: Path) -> None:
    body = {
        "applied": {"generation": 7, "sha256": "ab" * 32, "at": "2026-11-30T03:00:00Z"},
        "rejected": {
            "sha256": "cd" * 32,
            "reason": "error: Parse error in file slurm.conf line 12",
            "at": "2026-11-30T03:05:00Z",
        },
        "restart_required": True,
        "pending": False,
    }
    async with (
        serving(control_plane_app(TOKEN, _nodes(int(time.time())), ["gpu-b"])) as cp,
        serving(config_sync_app(body)) as cs,
    ):
        r = await status("--control-plane", cp, "--token-file", _token(tmp_path), "--config-sync", cs)
    assert r.code == 0, r.err
    config = r.out.split("CONFIG\n", 1)[1].splitlines()
    assert config[0] == f"generation 7, sha256 {'ab' * 6}, applied at 2026-11-30T03:00:00Z"
    assert config[1] == (
        f"last rejection: sha256 {'cd' * 6} at 2026-11-30T03:05:00Z: "
        "error: Parse error in file slurm.conf line 12"
    )
    assert config[2] == "pending change: no; restart required: YES"


async def test_config_sync_down_still_shows_the_fleet(tmp_path: Path) -> None:
    async with serving(config_sync_app({})) as gone:
        pass
    async with serving(control_plane_app(TOKEN, _nodes(int(time.time())), ["gpu-b"])) as cp:
        r = await status(
            "--control-plane",
            cp,
            "--token-file",
            _token(tmp_path),
            "--config-sync",
            gone,
            "--timeout-seconds",
            "2",
        )
    assert r.code == 1
    assert "gpu-a" in r.out and "1.gpu-b" in r.out
    assert "(unavailable: config-sync did not answer)" in r.out
    assert f"config-sync: {gone}/status: unreachable" in r.err
