"""A dev cluster ends with the process that owns it, however that process ends: a small owner killed
by SIGKILL, or a whole pytest run stopped by SIGTERM, leaves no daemon, slurmstepd or job behind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from sidecars.devcluster import Release
from tests.devcluster import lifetime

REPO = Path(__file__).resolve().parents[2]


def _owner_argv(kind: str) -> list[str]:
    if kind == "owner":
        return [sys.executable, "-m", "tests.devcluster.lifetime"]
    return [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-s",
        "-p",
        "no:cacheprovider",
        "--timeout=0",
        f"{lifetime.__file__}::test_hold_a_cluster_until_killed",
    ]


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("kind", "sig"),
    [("owner", signal.SIGKILL), ("pytest", signal.SIGTERM)],
    ids=["owner-sigkill", "pytest-sigterm"],
)
async def test_nothing_outlives_the_owner(release: Release, kind: str, sig: signal.Signals) -> None:
    proc = await asyncio.create_subprocess_exec(
        *_owner_argv(kind),
        cwd=REPO,
        env={**os.environ, lifetime.HOLD_ENV: lifetime.release_json(release)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    seen, info, watched = b"", None, None
    try:
        while info is None:
            line = await asyncio.wait_for(proc.stdout.readline(), 150)
            assert line, f"the owner exited early: {seen.decode()[-3000:]}"
            seen += line
            text = line.decode().strip()
            if text.startswith(lifetime.HOLDING):
                info = json.loads(text[len(lifetime.HOLDING) :])
        watched = await lifetime.Watched.capture(proc.pid, info["init"], info["dir"])
        assert watched.names() >= lifetime.CLUSTER_NAMES, watched.procs
        proc.send_signal(sig)
        await asyncio.wait_for(proc.wait(), 30)
        assert proc.returncode == -sig
        left = await watched.wait_gone(timeout=15)
        assert not left, f"still running after the owner was killed: {left}"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if watched is not None:
            await lifetime.kill_left(watched)
        if info is not None:
            lifetime.remove_dir(info["dir"], release)
