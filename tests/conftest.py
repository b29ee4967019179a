"""Shared test machinery: the real Slurm releases, a dev cluster per test, and guards against leaks.

Every test that asks for `release` (or for `cluster`, which asks for it) runs once per Slurm release,
with the release in its id: `slurm22` (22.05, the host's packages), `slurm24` (24.11, Debian trixie
in a chroot) and `slurm26` (26.05, Debian sid in a chroot); the chroots are built once per machine
and reused. A release that cannot run is an error, not a silent skip, unless
SIDECARS_ALLOW_MISSING_SLURM=1 says a partial run is wanted.

Only a test whose behaviour differs between releases runs on all three, and says why with
`@pytest.mark.per_release("why")`; every other test runs on one release, chosen from its id by a
stable hash so that the three share them (tests/releases.py, docs/testing.md). A test (or a class, or
a module through `pytestmark`) that holds only on some releases says which:

    @pytest.mark.releases("slurm24", "slurm26")
    async def test_configless(cluster: DevCluster) -> None: ...

It then runs, and is named, only for those (one of them, unless `per_release` too); an unknown id is
a collection error. `-k slurm26` runs the tests that run on 26.05; `--every-release` runs every test
on every release it allows.

Helpers shared by tests live in modules named for what they hold (`tests/helpers.py` for every
concern, `tests/<concern>/<noun>.py` for one: `agents.py`, `servers.py`, `harness.py`), never in
a `test_*.py` or a `conftest.py` that other modules import; the benchmarks import the same ones.

Under pytest-xdist (`make test` runs `-n`), the controller builds the releases once and hands them
to its workers; each worker starts its own clusters (their own dirs under /tmp and their own ports),
and the leak guards below watch each worker's own processes and tasks.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sidecars.devcluster import ClusterSpec, DevCluster, Release
from sidecars.devcluster.release import available_releases
from sidecars.runtime import logs
from sidecars.runtime.pdeathsig import tie_to_parent
from tests.releases import EVERY_RELEASE_OPTION, PER_RELEASE, RELEASE_IDS, release_ids

if TYPE_CHECKING:
    from tests.fakekube import FakeKube

# pytest-timeout's alarm held off while a report is made, and where the time went (why: in each module)
pytest_plugins = ["tests.timeouts", "tests.timetable"]

RELEASES_KEY = pytest.StashKey[dict[str, Release]]()
MISSING_KEY = pytest.StashKey[list[str]]()
WORKERINPUT = "sidecars_releases"
# the run's MariaDB datadir template (sidecars.devcluster.mariadb.template): made in this directory by
# the first accounting cluster of the run, copied by every other one (_db_template below)
DB_TEMPLATE_KEY = pytest.StashKey[Path]()
DB_TEMPLATE_INPUT = "sidecars_db_template"
DATA = Path(__file__).parent / "data"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        EVERY_RELEASE_OPTION,
        action="store_true",
        help="run every test that needs Slurm on every release it allows, not only per_release ones",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cluster(**spec): the ClusterSpec for the `cluster` fixture")
    config.addinivalue_line(
        "markers", "releases(*ids): run only on these releases (slurm22, slurm24, slurm26)"
    )
    config.addinivalue_line(
        "markers", f"{PER_RELEASE}(why): behaviour differs between releases: run on each (not only one)"
    )
    logs.configure(json=False, level=os.environ.get("SIDECARS_TEST_LOG_LEVEL", "warning"))
    if hasattr(config, "workerinput"):
        # an xdist worker outlives a controller stopped by SIGTERM, holding its clusters: it must not
        tie_to_parent()


def _db_template(config: pytest.Config) -> Path:
    """The run's template directory: an xdist worker's is its controller's; the run's own process
    (the controller, or the only one) makes it when first asked (a run starting no cluster, such as
    `--collect-only`, makes none) and removes it at its end."""
    if DB_TEMPLATE_KEY not in config.stash:
        given = getattr(config, "workerinput", {}).get(DB_TEMPLATE_INPUT)
        made = Path(given) if given else Path(tempfile.mkdtemp(prefix="slc-dbt-", dir="/tmp"))
        config.stash[DB_TEMPLATE_KEY] = made
    return config.stash[DB_TEMPLATE_KEY]


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and DB_TEMPLATE_KEY in config.stash:
        shutil.rmtree(config.stash[DB_TEMPLATE_KEY], ignore_errors=True)


def _releases(config: pytest.Config) -> dict[str, Release]:
    if RELEASES_KEY not in config.stash:
        given = getattr(config, "workerinput", {}).get(WORKERINPUT)
        if given is not None:  # an xdist worker: the controller built them
            found = [
                Release(r["name"], Path(r["root"]) if r["root"] else None, r["version"]) for r in given[0]
            ]
            missing = list(given[1])
        else:
            found, missing = asyncio.run(available_releases(build=True))
        config.stash[RELEASES_KEY] = {r.name: r for r in found}
        config.stash[MISSING_KEY] = missing
    return config.stash[RELEASES_KEY]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller, once per worker: build the releases here, once, and pass them on."""
    node.workerinput[DB_TEMPLATE_INPUT] = str(_db_template(node.config))
    if os.environ.get("SIDECARS_NO_SLURM") == "1":
        return
    releases = _releases(node.config)
    node.workerinput[WORKERINPUT] = (
        [
            {"name": r.name, "root": str(r.root) if r.root else None, "version": r.version}
            for r in releases.values()
        ],
        node.config.stash[MISSING_KEY],
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize `release` over the releases the test runs on (tests/releases.py)."""
    if "release" not in metafunc.fixturenames:
        return
    if any("release" in _argnames(m) for m in metafunc.definition.iter_markers("parametrize")):
        return  # the test parametrizes a `release` argument of its own
    ids = release_ids(metafunc.definition, metafunc.config.getoption(EVERY_RELEASE_OPTION))
    metafunc.parametrize("release", [RELEASE_IDS[i] for i in ids], ids=ids, indirect=True)


def _argnames(mark: pytest.Mark) -> list[str]:
    names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
    return [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)


def pytest_report_header(config: pytest.Config) -> list[str]:
    if os.environ.get("SIDECARS_NO_SLURM") == "1":
        return ["slurm: not used (SIDECARS_NO_SLURM=1)"]
    releases = _releases(config)
    lines = [f"slurm releases: {', '.join(str(r) for r in releases.values()) or 'none'}"]
    lines += [f"slurm unavailable: {m}" for m in config.stash[MISSING_KEY]]
    return lines


@pytest.fixture
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
async def fake_kube() -> AsyncIterator[tuple[FakeKube, str]]:
    """The fake Kubernetes API server, serving for this test: (its state, its URL)."""
    # imported here: it brings kubernetes-asyncio (1 s of CPU), which xdist's controller and the
    # suite's own pytest subprocesses, which run no test of it, need not load
    from tests.fakekube import FakeKube

    fake = FakeKube()
    async with fake.serving() as url:
        yield fake, url


@pytest.fixture
async def cluster(release: Release, request: pytest.FixtureRequest) -> AsyncIterator[DevCluster]:
    marker = request.node.get_closest_marker("cluster")
    spec = ClusterSpec(**marker.kwargs) if marker else ClusterSpec()
    keep = os.environ.get("SIDECARS_KEEP_CLUSTER_DIRS") == "1"  # debugging: read its logs after
    c = DevCluster(release, spec, db_template=_db_template(request.config), keep_dir=keep)
    await c.start()
    if keep:
        print(f"\ncluster dir kept: {c.dir}", file=sys.stderr)
    try:
        yield c
    finally:
        await c.stop()
        left = c.processes()
        assert not left, f"cluster processes left behind: {[_describe(pid) for pid in left]}"


def _describe(pid: int) -> str:
    """pid, name, state and kernel wait channel: enough to tell a stuck process from a late one."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return f"{pid} (gone)"
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    state = stat[stat.rindex(")") + 2 :].split()[0]
    return f"{pid} {name} state={state} wchan={wchan}"


def descendants(root: int) -> list[tuple[int, str]]:
    """Every live process under `root` (zombies left out), with its name. Read from the kernel's
    per-thread children lists: the cost is that of the tree (a few processes), not of every
    process on this shared machine, for the guard below runs twice per test."""
    out: list[tuple[int, str]] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone meanwhile: its children went to a reaper, as with any exit
        for tid in tasks:
            try:
                kids = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            for kid in kids:
                try:
                    stat = Path(f"/proc/{kid}/stat").read_text()
                except OSError:
                    continue
                if stat[stat.rindex(")") + 2 :].split()[0] == "Z":
                    continue
                out.append((int(kid), stat[stat.index("(") + 1 : stat.rindex(")")]))
                todo.append(int(kid))
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
