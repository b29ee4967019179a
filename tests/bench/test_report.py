"""bench/_report.py, shared by the benchmarks: the percentile every one of them reports is the
nearest rank, and one_core() pins a process to a single core."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _report import percentile

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_percentile_is_the_nearest_rank() -> None:
    samples = [float(i) for i in range(1, 41)]  # 1..40
    random.Random(7).shuffle(samples)
    assert percentile(samples, 95) == 38.0  # the 38th of 40: 95 % at or below it, not the 39th
    assert percentile(samples, 50) == 20.0
    assert percentile(samples, 100) == 40.0
    assert percentile(samples, 0) == 1.0
    hundred = [i / 10 for i in range(100, 0, -1)]  # 10.0 .. 0.1, reversed
    assert percentile(hundred, 99) == 9.9
    assert percentile([3.0], 99) == 3.0
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 50)


def test_one_core_pins_the_process_to_one_core() -> None:
    code = "import os, _report; _report.one_core(); print(len(os.sched_getaffinity(0)))"
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=BENCH, capture_output=True, text=True, check=True, timeout=60
    )
    assert r.stdout.strip() == "1"
