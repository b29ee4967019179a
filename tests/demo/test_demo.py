"""The demo is what a user runs first: the tour must reach its end on every release, and the live
mode must stop on Ctrl-C or SIGTERM leaving nothing behind."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys

import pytest

from sidecars.cli import self_argv
from sidecars.devcluster import Release


def _mentions(pid: str, text: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return text in f.read()
    except OSError:
        return False


def _demo_argv(release: Release, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sidecars", "demo", "--release", release.name, *extra]


@pytest.mark.timeout(240)
async def test_tour_runs_to_the_end(release: Release) -> None:
    proc = await asyncio.create_subprocess_exec(
        *_demo_argv(release, "--tour"), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 200)
    text = out.decode()
    assert proc.returncode == 0, text[-3000:]
    summary = text[text.index("\nSummary") :]
    assert summary.count("\n  ok ") == 6 and "FAIL" not in summary, summary
    assert re.search(r"rejected: .*ThisIsNotAKey", text), text[-3000:]
    # the operator's page: its address and where its viewer token is
    assert re.search(r"web page: +http://127\.0\.0\.1:\d+/ui/ \(viewer token in \S+viewer-token\)", text), (
        text
    )
    cluster_dir = re.search(r"is running in (\S+)\.", text)
    assert cluster_dir is not None and not os.path.exists(cluster_dir[1])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_live_mode_stops_on_signal_and_leaves_nothing(sig: signal.Signals) -> None:
    if os.environ.get("SIDECARS_NO_SLURM") == "1":
        pytest.skip("needs the host's Slurm")
    proc = await asyncio.create_subprocess_exec(
        *self_argv("demo"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    seen = b""
    try:
        while b"Ctrl-C stops it" not in seen:
            line = await asyncio.wait_for(proc.stdout.readline(), 90)
            assert line, f"demo exited early: {seen.decode()[-2000:]}"
            seen += line
        table = await asyncio.wait_for(proc.stdout.readuntil(b"n3"), 30)  # the live table shows the nodes
        assert b"n1" in table
        proc.send_signal(sig)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    cluster_dir = re.search(rb"is running in (\S+)\.", seen)
    assert cluster_dir is not None
    assert not os.path.exists(cluster_dir[1])
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _mentions(p, cluster_dir[1])]
