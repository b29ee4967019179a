"""`demo --shape slinky`: the tour reaches its end on a Slinky-shaped cluster; a release that
cannot run that shape is a bad invocation with one line saying why."""

from __future__ import annotations

import re

import pytest

from sidecars.devcluster import Release
from tests.demo.tours import demo_argv, tour
from tests.helpers import refused_invocation


@pytest.mark.timeout(240)
@pytest.mark.releases("slurm26")
async def test_the_tour_runs_to_the_end_on_the_slinky_shape(release: Release) -> None:
    text, summary = await tour(release, "--shape", "slinky", seconds=200)
    assert "(slinky shape)" in text
    assert summary.count("\n  ok ") == 9 and "FAIL" not in summary, summary
    assert "then its dynamic record deleted" in text
    assert re.search(r"rejected: .*ThisIsNotAKey", text), text[-3000:]


@pytest.mark.releases("slurm22")
async def test_the_slinky_shape_on_22_05_is_a_bad_invocation(release: Release) -> None:
    line = await refused_invocation(*demo_argv(release, "--tour", "--shape", "slinky"))
    assert "--shape slinky: the Slinky shape needs Slurm 23.11" in line, line
