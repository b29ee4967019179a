"""How a piece of work's cost grows with its input, measured so that a loaded machine cannot fake
it: CPU time of this thread (waiting for a core costs none), the least of a few runs, two sizes
compared in the same process, with a wide margin and one retry."""

from __future__ import annotations

import time
from collections.abc import Callable

SMALL, LARGE = 10_000, 100_000
# 10x the input: linear work costs ~10x, quadratic ~100x; the margin takes in the noise of a
# short measurement (the small size's cost is floored at FLOOR seconds)
RATIO = 35
FLOOR = 2e-4


def cpu_seconds(work: Callable[[], object], runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.thread_time()
        work()
        best = min(best, time.thread_time() - started)
    return best


def superlinear(
    make: Callable[[int], str],
    work: Callable[[str], object],
    small_size: int = SMALL,
    large_size: int = LARGE,
) -> str | None:
    """None when `work` over `make(large_size)` costs at most RATIO times its cost over
    `make(small_size)` (ten times smaller; tried twice), else a sentence with both figures. Some
    quadratic work (copying a string a character at a time) shows only past ~100,000 characters,
    where its copies outgrow the CPU's caches: such a path is measured at 50,000 and 500,000."""
    said = ""
    for _ in range(2):
        small_text, large_text = make(small_size), make(large_size)
        small = cpu_seconds(lambda t=small_text: work(t))
        large = cpu_seconds(lambda t=large_text: work(t), runs=1 if small > 0.05 else 3)
        if large <= RATIO * max(small, FLOOR):
            return None
        said = f"{len(large_text)} characters took {large:.4f}s against {small:.4f}s for {len(small_text)}"
    return said
