"""A test whose time runs out while pytest makes its report fails with a timeout, and the run goes on
(tests/timeouts.py): pytest-timeout's alarm, raised inside pytest's own report hook, used to end the
whole run with an INTERNALERROR."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SLOW_REPORT = """
import time


def pytest_runtest_makereport(item, call):
    if call.when == "call" and call.excinfo is not None:
        time.sleep(2)  # a slow failure report (a long traceback on a loaded machine): the alarm comes now
"""

TESTS = """
import time

import pytest


@pytest.mark.timeout(1, method="signal")
def test_fails_just_before_its_time_is_up():
    time.sleep(0.3)
    assert False, "its own failure"


def test_the_run_goes_on():
    pass
"""


def _run(tmp_path: Path, *plugins: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(SLOW_REPORT)
    (tmp_path / "test_slow.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the project's options: this run's own
    loads = [arg for p in plugins for arg in ("-p", p)]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *loads, "-q"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,  # the exit code is what the test reads
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.timeout(90)
def test_the_time_running_out_in_a_report_fails_that_test_only(tmp_path: Path) -> None:
    done = _run(tmp_path, "tests.timeouts")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out  # tests failed; not 3 (internal error)
    assert "INTERNALERROR" not in out, out
    assert "1 failed, 1 passed" in out, out
    assert "Timeout: the test's time ran out while its call report was made" in out, out
    assert "its own failure" in out, out  # and why it failed first is kept
