"""The demo as a user runs it: its command line, and its tour run to the end."""

from __future__ import annotations

import asyncio
import sys

from sidecars.devcluster import Release
from sidecars.runtime.pdeathsig import die_with_parent
from sidecars.runtime.waits import within


def demo_argv(release: Release, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sidecars", "demo", "--release", release.name, *extra]


async def tour(release: Release, *extra: str, seconds: float) -> tuple[str, str]:
    """`demo --tour` on `release` (with `extra`), which must exit 0 within `seconds`: its output, and
    the summary at its end."""
    proc = await asyncio.create_subprocess_exec(
        *demo_argv(release, "--tour", *extra),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        preexec_fn=die_with_parent(),  # a test run that is killed takes its demo (and cluster) along
    )
    out, _ = await within(proc.communicate(), seconds)
    text = out.decode()
    assert proc.returncode == 0, text[-3000:]
    return text, text[text.index("\nSummary") :]
