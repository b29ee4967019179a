"""`demo --accounting`: the tour ends with the jobs slurmdbd recorded, read back with sacct; a shape
that cannot have accounting is a bad invocation with one line saying why."""

from __future__ import annotations

import re

import pytest

from sidecars.devcluster import Release
from tests.demo.tours import demo_argv, tour
from tests.helpers import refused_invocation


@pytest.mark.timeout(300)
@pytest.mark.releases("slurm22", "slurm26")
@pytest.mark.per_release("the host's 22.05 slurmdbd and sacct and a chroot's 26.05 ones")
async def test_the_tour_shows_jobs_in_sacct(release: Release) -> None:
    text, summary = await tour(release, "--accounting", seconds=260)
    assert "FAIL" not in summary and "ok   Jobs in accounting" in summary, summary
    assert re.search(r"sacct: job \d+ CANCELLED", text), text[-3000:]
    assert re.search(r"sacct: job \d+ COMPLETED \(exit 0:0\)", text), text[-3000:]  # the tour.s own jobs


@pytest.mark.releases("slurm26")
async def test_accounting_with_the_slinky_shape_is_a_bad_invocation(release: Release) -> None:
    line = await refused_invocation(*demo_argv(release, "--tour", "--accounting", "--shape", "slinky"))
    assert "classic shape only" in line, line


@pytest.mark.timeout(420)
@pytest.mark.releases("slurm24")
async def test_the_tour_ends_with_a_whole_cluster_upgrade_shown_stage_by_stage(release: Release) -> None:
    text, summary = await tour(release, "--accounting", "--upgrade-to", "sid", seconds=380)
    assert "FAIL" not in summary and "ok   A whole-cluster upgrade" in summary, summary
    assert "ok   Jobs in accounting" in summary, summary
    step = text[text.index("A whole-cluster upgrade (slurmdbd") : text.index("\nSummary")]
    # each stage's start and end as the control plane reported them, in Slurm's order
    ends = re.findall(r"^  (preflight|slurmdbd|slurmctld|workers)\s+done ", step, re.M)
    assert ends == ["preflight", "slurmdbd", "slurmctld", "workers"], step
    assert re.search(r"^  \$ upgrade status \| cluster upgrade to 26\.05\.\d+: complete$", step, re.M), step
    assert re.search(r"^  \$ upgrade status \| slurmdbd 26\.05\.\d+ \(accounting\)$", step, re.M), step
    assert "the page's Upgrades section: preflight done; slurmdbd done; slurmctld done; workers done" in step
    assert re.search(r"now slurmctld 26\.05\.\d+, slurmdbd 26\.05\.\d+; sacct: job \d+ COMPLETED", step), step
    # the scale-in step's drained worker was moved and left drained
    assert "n3 moved too, and left drained as before" in step, step


@pytest.mark.releases("slurm24")
async def test_an_upgrade_without_accounting_is_a_bad_invocation(release: Release) -> None:
    line = await refused_invocation(*demo_argv(release, "--tour", "--upgrade-to", "sid"))
    assert "--upgrade-to: needs --accounting and --release chroot" in line, line
