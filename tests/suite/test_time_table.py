"""The time table (tests/timetable.py) of a small run in its own pytest, under xdist as `make test`
runs: per file, per release and per fixture set-up, each fixture's time carried from the worker that
set it up to the controller that prints it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent

SUITE = """
import time

import pytest


@pytest.fixture
def slow_setup():
    time.sleep(0.3)  # what the table must see: set-up time, owned by this fixture


@pytest.mark.parametrize("release", ["a", "b"], ids=["slurm24", "slurm26"])
def test_on_two_releases(slow_setup, release):
    pass


def test_without_slurm():
    pass
"""


def test_the_table_sums_files_releases_and_fixture_set_ups_across_workers(tmp_path: Path) -> None:
    (tmp_path / "test_small.py").write_text(SUITE)
    table = tmp_path / "run" / "table.txt"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "tests.timetable", "-p", "no:cacheprovider"),
            *("-n", "2", "--rootdir", str(tmp_path), "-c", "/dev/null"),
            *("--time-table-file", str(table), "--time-table-top", "2", str(tmp_path / "test_small.py")),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,  # bounded by the test's own time-out (pytest-timeout), which kills it
    )
    assert done.returncode == 0, done.stdout + done.stderr
    shown = done.stdout[done.stdout.index("where the time went") :]
    assert "over 3 tests" in shown and f"the whole table: {table}" in shown
    whole = table.read_text()
    rows = {line.split()[-1]: line.split() for line in whole.splitlines() if line.startswith(" ")}
    # seconds, "s", share, count, unit, name
    assert rows["test_small.py"][3] == "3"
    assert rows["slurm24"][3] == rows["slurm26"][3] == rows["none"][3] == "1"
    assert rows["slow_setup"][3] == "2" and float(rows["slow_setup"][0]) >= 0.6, rows["slow_setup"]
    assert float(rows["slurm24"][0]) >= 0.3 and float(rows["slurm26"][0]) >= 0.3
    assert "test_small.py::test_on_two_releases[slurm24]" in whole  # every test in the file
    # the terminal shows the top rows only
    assert "top 2 of" in shown and "test_small.py::test_without_slurm" not in shown
