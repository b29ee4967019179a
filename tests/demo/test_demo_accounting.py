"""`demo --accounting`: the tour ends with the jobs slurmdbd recorded, read back with sacct; a shape
that cannot have accounting is a bad invocation with one line saying why."""

from __future__ import annotations

import asyncio
import re
import sys

import pytest

from sidecars.devcluster import Release
from sidecars.runtime.waits import within
from tests.helpers import refused_invocation


def _demo(release: Release, *more: str) -> list[str]:
    return [sys.executable, "-m", "sidecars", "demo", "--tour", "--release", release.name, *more]


@pytest.mark.timeout(300)
@pytest.mark.releases("slurm22", "slurm26")
async def test_the_tour_shows_jobs_in_sacct(release: Release) -> None:
    proc = await asyncio.create_subprocess_exec(
        *_demo(release, "--accounting"), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await within(proc.communicate(), 260)
    text = out.decode()
    assert proc.returncode == 0, text[-3000:]
    summary = text[text.index("\nSummary") :]
    assert "FAIL" not in summary and "ok   Jobs in accounting" in summary, summary
    assert re.search(r"sacct: job \d+ CANCELLED", text), text[-3000:]
    assert re.search(r"sacct: job \d+ COMPLETED \(exit 0:0\)", text), text[-3000:]  # the tour.s own jobs


@pytest.mark.releases("slurm26")
async def test_accounting_with_the_slinky_shape_is_a_bad_invocation(release: Release) -> None:
    line = await refused_invocation(*_demo(release, "--accounting", "--shape", "slinky"))
    assert "classic shape only" in line, line
