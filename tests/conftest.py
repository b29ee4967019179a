"""Shared test machinery: the real Slurm releases, a dev cluster per test, and guards against leaks.

Every test that asks for `cluster` runs once per Slurm release available here (22.05 on the host,
24.11 in a chroot built once per run). A release that cannot run is an error, not a silent skip,
unless SIDECARS_ALLOW_MISSING_SLURM=1 says a partial run is wanted.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from sidecars.devcluster import ClusterSpec, DevCluster, Release
from sidecars.devcluster.release import available_releases
from sidecars.runtime import logs

RELEASES = ("host", "chroot")
RELEASES_KEY = pytest.StashKey[dict[str, Release]]()
MISSING_KEY = pytest.StashKey[list[str]]()
DATA = Path(__file__).parent / "data"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cluster(**spec): the ClusterSpec for the `cluster` fixture")
    logs.configure(json=False, level=os.environ.get("SIDECARS_TEST_LOG_LEVEL", "warning"))


def _releases(config: pytest.Config) -> dict[str, Release]:
    if RELEASES_KEY not in config.stash:
        found, missing = asyncio.run(available_releases(build=True))
        config.stash[RELEASES_KEY] = {r.name: r for r in found}
        config.stash[MISSING_KEY] = missing
    return config.stash[RELEASES_KEY]


def pytest_report_header(config: pytest.Config) -> list[str]:
    if os.environ.get("SIDECARS_NO_SLURM") == "1":
        return ["slurm: not used (SIDECARS_NO_SLURM=1)"]
    releases = _releases(config)
    lines = [f"slurm releases: {', '.join(str(r) for r in releases.values()) or 'none'}"]
    lines += [f"slurm unavailable: {m}" for m in config.stash[MISSING_KEY]]
    return lines


@pytest.fixture(params=RELEASES, ids=lambda r: {"host": "slurm22", "chroot": "slurm24"}[r])
def release(request: pytest.FixtureRequest) -> Release:
    if os.environ.get("SIDECARS_NO_SLURM") == "1":
        pytest.skip("SIDECARS_NO_SLURM=1")
    releases = _releases(request.config)
    if request.param not in releases:
        reason = "; ".join(request.config.stash[MISSING_KEY])
        if os.environ.get("SIDECARS_ALLOW_MISSING_SLURM") == "1":
            pytest.skip(f"Slurm release {request.param} unavailable: {reason}")
        pytest.fail(f"Slurm release {request.param} unavailable: {reason}")
    return releases[request.param]


@pytest.fixture
def sockdir() -> Iterator[Path]:
    """A short directory for unix sockets (sun_path is 108 bytes: pytest's tmp_path is too deep)."""
    d = Path(tempfile.mkdtemp(prefix="wk-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
async def cluster(release: Release, request: pytest.FixtureRequest) -> AsyncIterator[DevCluster]:
    marker = request.node.get_closest_marker("cluster")
    spec = ClusterSpec(**marker.kwargs) if marker else ClusterSpec()
    c = DevCluster(release, spec)
    await c.start()
    try:
        yield c
    finally:
        await c.stop()
        assert not c.processes(), f"cluster processes left behind: {c.processes()}"


def descendants(root: int) -> list[tuple[int, str]]:
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        names[int(entry)] = name
    out: list[tuple[int, str]] = []
    todo = [root]
    while todo:
        for kid in children.get(todo.pop(), []):
            out.append((kid, names[kid]))
            todo.append(kid)
    return out


@pytest.fixture(autouse=True)
def _no_leaked_processes() -> Iterator[None]:
    """Every process a test starts (daemons, jobs, subprocesses) is gone when it ends."""
    before = {pid for pid, _ in descendants(os.getpid())}
    yield
    leaked = [(pid, name) for pid, name in descendants(os.getpid()) if pid not in before]
    for _ in range(50):
        if not leaked:
            break
        time.sleep(0.02)  # a killed child may need a moment to be reaped
        leaked = [(pid, name) for pid, name in descendants(os.getpid()) if pid not in before]
    assert not leaked, f"test left processes running: {leaked}"


@pytest.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    """A test that leaves asyncio tasks pending fails: they would run into the next test."""
    yield
    me = asyncio.current_task()
    for _ in range(50):
        pending = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
        if not pending:
            return
        await asyncio.sleep(0.01)
    for t in pending:
        t.cancel()
    pytest.fail(f"test left asyncio tasks pending: {[t.get_coro() for t in pending]}")
