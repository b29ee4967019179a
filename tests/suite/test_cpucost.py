"""tests/cpucost.py, which tells where the suite's CPU goes: each test's line holds the CPU of its
phases, that of the processes each phase started and ended included, a test that empties its
environment loses no line, and the report sums them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cpucost import ENV, report

ROOT = Path(__file__).resolve().parents[2]
BURN_SECONDS = 0.3  # of CPU, in a child process
BURN = f"import time\nend = time.process_time() + {BURN_SECONDS}\nwhile time.process_time() < end: pass\n"
SAMPLE = f"""
import os, subprocess, sys
import pytest

@pytest.fixture
def child_at_setup():
    subprocess.run([sys.executable, "-c", {BURN!r}], check=True)

def test_a_child_in_setup_and_in_call(child_at_setup):
    subprocess.run([sys.executable, "-c", {BURN!r}], check=True)

def test_no_child():
    pass

def test_emptying_the_environment():
    os.environ.clear()
"""


def test_each_phase_counts_the_cpu_of_its_children_and_every_test_has_its_line(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the sample's own: none of the suite's options
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    out = tmp_path / "cpu.jsonl"
    plugins = ["tests.cpucost", "no:cacheprovider", "no:schemathesis", "no:anyio", "no:xdist"]
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-c", str(tmp_path / "pytest.ini")]
        + [word for name in plugins for word in ("-p", name)]
        + [str(tmp_path / "test_sample.py")],
        cwd=ROOT,  # where `tests.cpucost` is found
        env={**os.environ, ENV: str(out)},
        capture_output=True,
        timeout=60,
        check=True,
    )
    lines = {json.loads(text)["id"].split("::")[1]: json.loads(text) for text in out.read_text().splitlines()}
    assert set(lines) == {
        "test_a_child_in_setup_and_in_call",
        "test_no_child",
        "test_emptying_the_environment",
    }
    burnt = lines["test_a_child_in_setup_and_in_call"]
    assert burnt["setup"]["children"] >= 0.8 * BURN_SECONDS, burnt
    assert burnt["call"]["children"] >= 0.8 * BURN_SECONDS, burnt
    assert lines["test_no_child"]["call"]["children"] == 0.0, lines["test_no_child"]
    said = report(out)
    assert said.startswith("3 tests, ") and "test_sample.py" in said and "no release" in said, said
