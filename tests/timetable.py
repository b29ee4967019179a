"""Where the suite's time goes, in one table at the end of every run (a pytest plugin: tests/conftest.py
loads it).

Sums each test's wall time (setup + call + teardown, as pytest reports them) per test file and per
release (the `slurm22`/`slurm24`/`slurm26` parameter; `none` for a test that needs no Slurm), and
each fixture's set-up per fixture (a `cluster` named by its `cluster` marker's spec, since an
accounting or HA cluster costs more than a plain one), sorted, biggest first. The terminal shows the
top `--time-table-top` rows (15) of each with the totals; the whole table, every test's own time
too, goes to `--time-table-file` (default: `.pytest_cache/d/time-table/last.txt`).

Under xdist each worker times its own tests and fixtures (a fixture's time rides on the test report
that set it up) and the controller adds them up, so the sums are worker-seconds: at `-n 8` they add
to about eight times the run's wall time, which the last line gives beside them. A fixture's time is
its own set-up, without the fixtures it asks for (pytest sets those up first, each timed as itself).
Its cost is a clock read around each fixture set-up and a few dict updates per test.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

TOP_OPTION = "--time-table-top"
FILE_OPTION = "--time-table-file"
# the attributes a test report carries from a worker to the controller (xdist serializes a report's
# JSON-able attributes and restores them)
FIXTURES_ATTR = "sidecars_fixture_seconds"
_RELEASE = re.compile(r"[\[-](slurm2[246])[\]-]")


class _Table:
    """The run's sums, kept in the controller (or the only process)."""

    def __init__(self) -> None:
        self.files: Counter[str] = Counter()
        self.file_tests: Counter[str] = Counter()
        self.releases: Counter[str] = Counter()
        self.release_tests: Counter[str] = Counter()
        self.fixtures: Counter[str] = Counter()
        self.fixture_setups: Counter[str] = Counter()
        self.phases: Counter[str] = Counter()
        self.tests: Counter[str] = Counter()
        self.started = time.monotonic()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("time-table", "where the suite's time goes (tests/timetable.py)")
    group.addoption(TOP_OPTION, type=int, default=15, help="rows of each part shown at the end (15)")
    group.addoption(FILE_OPTION, default=None, help="where the whole table goes")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(TimeTable(config), "sidecars-time-table")


class TimeTable:
    """The plugin's state for one run: a `pytest_runtest_logreport` has no config to keep it in."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.table = _Table()
        # fixtures set up since this process's last report: (label, seconds)
        self.pending: list[tuple[str, float]] = []

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Any:
        t0 = time.monotonic()
        try:
            return (yield)
        finally:
            self.pending.append((_label(fixturedef.argname, request), time.monotonic() - t0))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, Any]:
        report = yield
        if self.pending:
            setattr(report, FIXTURES_ATTR, [[label, round(took, 4)] for label, took in self.pending])
            self.pending.clear()
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """In the controller for every worker's report (and in each worker for its own: the workers'
        sums are never printed)."""
        table = self.table
        path = report.nodeid.split("::", 1)[0]
        found = _RELEASE.search(report.nodeid.split("::", 1)[-1])
        release = found.group(1) if found else "none"
        table.files[path] += report.duration
        table.releases[release] += report.duration
        table.phases[report.when] += report.duration
        table.tests[report.nodeid] += report.duration
        if report.when == "setup":
            table.file_tests[path] += 1
            table.release_tests[release] += 1
        for label, took in getattr(report, FIXTURES_ATTR, None) or []:
            table.fixtures[label] += took
            table.fixture_setups[label] += 1

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        config = self.config
        if hasattr(config, "workerinput") or not self.table.phases:
            return
        target = config.getoption(FILE_OPTION)
        if target is None and getattr(config, "cache", None) is not None:
            target = str(config.cache.mkdir("time-table") / "last.txt")
        terminalreporter.write_sep("=", "where the time went (tests/timetable.py)")
        for line in render(self.table, top=config.getoption(TOP_OPTION)):
            terminalreporter.write_line(line)
        if target:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            Path(target).write_text("\n".join(render(self.table, top=None)) + "\n")
            terminalreporter.write_line(f"the whole table: {target}")


def _label(argname: str, request: pytest.FixtureRequest) -> str:
    if argname != "cluster":
        return argname
    marker = request.node.get_closest_marker("cluster")
    if not marker or not marker.kwargs:
        return "cluster()"
    return "cluster(" + ", ".join(f"{k}={v!r}" for k, v in sorted(marker.kwargs.items())) + ")"


def render(table: _Table, top: int | None) -> list[str]:
    total = sum(table.phases.values())
    tests = sum(table.release_tests.values())
    out = [
        f"{total:.1f} s of test time (setup {table.phases['setup']:.1f} s, call {table.phases['call']:.1f} s,"
        f" teardown {table.phases['teardown']:.1f} s) over {tests} tests;"
        f" {time.monotonic() - table.started:.1f} s of this process's wall time",
    ]
    out += _part("per file", table.files, table.file_tests, "tests", total, top)
    out += _part("per release", table.releases, table.release_tests, "tests", total, None)
    fixtures = sum(table.fixtures.values())
    out += _part("per fixture set-up", table.fixtures, table.fixture_setups, "set-ups", fixtures, top)
    if top is None:  # the whole table (the file) has every test too
        out += _part("per test", table.tests, Counter(dict.fromkeys(table.tests, 1)), "", total, None)
    return out


def _part(
    title: str, seconds: Counter[str], counts: Counter[str], unit: str, total: float, top: int | None
) -> list[str]:
    rows = seconds.most_common()
    shown = rows if top is None else rows[:top]
    out = ["", f"{title}: {total:.1f} s in all" + (f", top {len(shown)} of {len(rows)}" if top else "")]
    for name, secs in shown:
        share = 100 * secs / total if total else 0.0
        out.append(f"{secs:9.1f} s {share:5.1f}% {counts[name]:6d} {unit:8s} {name}")
    return out
