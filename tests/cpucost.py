"""Where the suite's CPU goes: each test's CPU time, per phase, written as one JSON line (a pytest
plugin, loaded only when asked: `-p tests.cpucost`, with SIDECARS_TEST_CPU=<file>).

The suite is bound by CPU (8 xdist workers on 2 cores), so its wall time falls only where CPU falls;
`--durations` shows wall time, which on a loaded machine is mostly waiting for a core. Each phase
(setup: the fixtures, a cluster's start among them; call; teardown) records the worker's own CPU and
that of its reaped children (CLI subprocesses, chroot shims and Slurm clients, with whatever they
reaped in turn), so a phase's cost includes the processes it started and ended. A child still
running when the phase ends is counted in the phase that reaps it; a process reaped by no ancestor
of the worker (a cluster's daemons, when `unshare` is killed before it reaps the namespace's init)
is not counted: the run's total from `time make test` is the figure to quote. Lines from every
worker go to one file (O_APPEND, one write per line); `python -m tests.cpucost FILE` sums them by
directory, file and release.
"""

from __future__ import annotations

import json
import os
import re
import resource
import sys
import time
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

ENV = "SIDECARS_TEST_CPU"


def _cpu() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def _phase(item: pytest.Item, when: str) -> Generator[None, None, None]:
    self0, kids0 = _cpu()
    wall0 = time.monotonic()
    try:
        yield
    finally:
        self1, kids1 = _cpu()
        costs = item.stash.setdefault(_COSTS, {})
        costs[when] = {
            "self": round(self1 - self0, 3),
            "children": round(kids1 - kids0, 3),
            "wall": round(time.monotonic() - wall0, 3),
        }


_COSTS = pytest.StashKey[dict[str, dict[str, float]]]()
# read once: a test may change os.environ (a worker's later lines would then be lost)
_PATH = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_PATH] = os.environ.get(ENV, "")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _phase(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _phase(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _phase(item, "teardown"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    path = item.config.stash.get(_PATH, "")
    if path and call.when == "teardown":
        costs = item.stash.setdefault(_COSTS, {})
        line = {
            "id": item.nodeid,
            "fixtures": sorted(getattr(item, "fixturenames", ())),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
            **costs,
        }
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)
    return report


def _cost(line: dict[str, Any]) -> float:
    phases = [line[p] for p in ("setup", "call", "teardown") if p in line]
    return float(sum(p["self"] + p["children"] for p in phases))


def report(path: Path, top: int = 25) -> str:
    """CPU seconds by test directory, by release and by file (the `top` costliest), from a run's lines."""
    lines = [json.loads(text) for text in path.read_text().splitlines() if text.strip()]
    groups: dict[str, dict[str, float]] = {"directory": {}, "release": {}, "file": {}}  # key -> CPU s
    counts: Counter[str] = Counter()
    for line in lines:
        file = line["id"].split("::")[0]
        found = re.search(r"\[(?:.*-)?(slurm2[246])(?:-.*)?\]$", line["id"])
        keys = {
            "directory": "/".join(file.split("/")[:2]),
            "release": found.group(1) if found else "no release",
            "file": file,
        }
        for group, key in keys.items():
            groups[group][key] = groups[group].get(key, 0.0) + _cost(line)
            counts[f"{group}:{key}"] += 1
    out = [f"{len(lines)} tests, {sum(map(_cost, lines)):.0f} s of CPU (their own and their children's)"]
    for group, costs in groups.items():
        out.append(f"by {group}:")
        for key, cpu in sorted(costs.items(), key=lambda kv: -kv[1])[:top]:
            out.append(f"  {cpu:8.1f} s {counts[f'{group}:{key}']:5d} tests  {key}")
    return "\n".join(out)


if __name__ == "__main__":
    print(report(Path(sys.argv[1])))
