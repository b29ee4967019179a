"""A whole-cluster upgrade 24.11 -> 26.05 on real daemons with MariaDB, through the stage machine and
the dev cluster's roles: every job before is there after, and a job spanning the upgrade completes
and is in `sacct`; each injected failure (a new slurmctld that refuses to start or comes up without
its jobs, a slurmdbd failing its conversion, a worker that never comes back) ends in a clear state,
rolled back where promised, no job lost; a skew outside Slurm's window is refused before anything
changes.

All on 24.11 only: 24.11 -> 26.05 is the one real upgrade the machine's releases make (22.05 is
outside 26.05's window, and is refused by the preflight test below)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from sidecars.controlplane.changes.cluster_upgrade.stages import ClusterUpgrade
from sidecars.devcluster import ClusterSpec, Release
from sidecars.devcluster.swap import SwappableCluster
from sidecars.devcluster.swap_roles import DevClusterRoles
from sidecars.runtime.waits import within
from sidecars.slurm import Version
from tests.controlplane.changes.upgrade_records import finished_record

pytestmark = [pytest.mark.releases("slurm24"), pytest.mark.timeout(300)]

IMAGES = {"slurmdbd": "sid", "slurmctld": "sid", "slurmd": "sid"}


class Sabotaged(SwappableCluster):
    """A cluster whose 26.05 daemon named in `sabotage` starts with extra words (`-c`: slurmctld
    clears its state; a missing config file: the daemon refuses to start)."""

    def __init__(self, release: Release, spec: ClusterSpec, sabotage: dict[str, list[str]]) -> None:
        super().__init__(release, spec)
        self.sabotage = sabotage

    def in_release(self, release: Release, *argv: str) -> list[str]:
        extra = self.sabotage.get(argv[0], []) if argv and release != self.release else []
        extra = [word.format(dir=self.dir) for word in extra]
        if extra and "-f" in argv and "-f" in extra:  # the foreground controller names its config
            argv = argv[: argv.index("-f")] + argv[argv.index("-f") + 2 :]
        return super().in_release(release, *argv, *extra)


class Run:
    """A cluster with a job that runs until told to end, a held job, and the upgrade's events."""

    def __init__(self, cluster: SwappableCluster, roles: DevClusterRoles, target: Version) -> None:
        self.cluster, self.roles, self.target = cluster, roles, target
        self.events: list[tuple[str, str, str]] = []
        self.go = cluster.out_dir / "go"
        self.spanning = 0
        self.held = 0
        self.on_event: Callable[[str, str, str], None] | None = None  # a test's own step on an event

    async def emit(self, stage: str, state: str, message: str) -> None:
        self.events.append((stage, state, message))
        if self.on_event is not None:
            self.on_event(stage, state, message)

    async def submit(self) -> dict[int, str]:
        c = self.cluster
        self.spanning = await c.sbatch(wrap=f"while [ ! -e {self.go} ]; do sleep 0.2; done")
        await c.wait_job(self.spanning, "RUNNING", timeout=60)
        self.held = await c.sbatch("--hold", wrap="true")
        return await self.roles.jobs()

    def upgrade(self) -> ClusterUpgrade:
        return ClusterUpgrade(self.roles, self.target, IMAGES, emit=self.emit, verify_timeout_seconds=30)


async def _run(release: Release, newer: Release, request: pytest.FixtureRequest) -> AsyncIterator[Run]:
    sabotage: dict[str, list[str]] = getattr(request, "param", {})
    spec = ClusterSpec(nodes=2, accounting=True, foreground_ctld=True)
    async with Sabotaged(release, spec, sabotage) as c:
        roles = DevClusterRoles(c, {"chroot": release, "sid": newer}, worker_timeout_seconds=30)
        yield Run(c, roles, Version.parse(newer.version))
        assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("cluster-upgrade")]


@pytest.fixture
async def run(release: Release, newer: Release, request: pytest.FixtureRequest) -> AsyncIterator[Run]:
    async for r in _run(release, newer, request):
        yield r


def _states(up: ClusterUpgrade) -> dict[str, str]:
    return {s.name: s.state for s in up.status.stages}


async def test_every_job_survives_the_whole_upgrade_and_the_spanning_one_reaches_sacct(run: Run) -> None:
    c = run.cluster
    before = await run.submit()
    up = run.upgrade()

    def end_the_job_once_the_workers_roll(stage: str, state: str, message: str) -> None:
        if (stage, state) == ("workers", "running"):
            run.go.touch()  # the roll waits for the job on its worker: it ends now, as jobs do

    run.on_event = end_the_job_once_the_workers_roll
    assert await up.run() == "complete", up.status.report()
    assert _states(up) == dict.fromkeys(("preflight", "slurmdbd", "slurmctld", "workers"), "done")
    versions = await run.roles.versions()
    assert {str(v) for v in versions.values()} == {str(run.target)}
    assert set(versions) == {"slurmdbd", f"slurmctld:{c.host}", "slurmd:n1", "slurmd:n2"}
    # every job of before is known after: the spanning one completed, the held one is still held
    after = await run.roles.jobs()
    assert set(before) <= set(after)
    assert after[run.held] == "PENDING"
    assert await finished_record(c, run.spanning) == ("COMPLETED", "0:0")
    assert Path(up.status.backup).stat().st_size > 0
    assert up.status.slurmctld_unanswered_seconds is not None
    # each stage said when it started and how it ended
    said = [(s, st) for s, st, _ in run.events]
    for stage in ("preflight", "slurmdbd", "slurmctld", "workers"):
        assert (stage, "running") in said and (stage, "done") in said
    nodes = await c.client().nodes()
    assert not [n.name for n in nodes if n.state.drain]  # every worker undrained after its move


async def test_a_target_outside_the_window_is_refused_before_anything_changes(run: Run) -> None:
    c = run.cluster
    before = await run.submit()
    pids = {d: c.hostpid(d) for d in ("slurmdbd", "slurmd-n1")} | {"slurmctld": c.foreground_pid()}
    versions = await run.roles.versions()
    up = ClusterUpgrade(run.roles, Version(27, 11, 0), IMAGES, emit=run.emit)
    assert await up.run() == "refused"
    assert _states(up) == {
        "preflight": "refused",
        "slurmdbd": "pending",
        "slurmctld": "pending",
        "workers": "pending",
    }
    detail = up.status.stage("preflight").detail
    assert "nothing changed" in detail and "4 releases behind 27.11" in detail
    assert await run.roles.versions() == versions
    assert {d: c.hostpid(d) for d in ("slurmdbd", "slurmd-n1")} | {"slurmctld": c.foreground_pid()} == pids
    assert await run.roles.jobs() == before
    assert not (c.dir / "upgrade").exists()  # not even a backup taken
    # and a downgrade is refused alike
    down = ClusterUpgrade(run.roles, Version(24, 5, 0), IMAGES)
    assert await down.run() == "refused"
    assert "downgrade" in down.status.stage("preflight").detail
    # a release that cannot be read (slurmdbd down) is not taken as fine: refused too
    await c.stop_slurmdbd()
    unread = ClusterUpgrade(run.roles, run.target, IMAGES)
    assert await unread.run() == "refused"
    assert "could not be read" in unread.status.stage("preflight").detail
    assert not (c.dir / "upgrade").exists()


@pytest.mark.parametrize(
    "run", [{"slurmctld": ["-f", "{dir}/etc/refused.conf"]}], indirect=True, ids=["slurmctld"]
)
async def test_a_new_slurmctld_that_refuses_to_start_is_rolled_back_with_every_job(run: Run) -> None:
    c = run.cluster
    # a setting the new release does not know: it refuses the whole file at once
    (c.dir / "etc" / "refused.conf").write_text(c.conf_path.read_text() + "NoSuchSetting=1\n")
    before = await run.submit()
    up = run.upgrade()
    assert await up.run() == "rolled_back"
    assert _states(up) == {
        "preflight": "done",
        "slurmdbd": "done",
        "slurmctld": "rolled_back",
        "workers": "pending",
    }
    assert "rolled back" in up.status.stage("slurmctld").detail
    assert "exited" in up.status.stage("slurmctld").detail  # the new one's own end, said
    versions = await run.roles.versions()
    assert versions[f"slurmctld:{c.host}"].at_least(24, 11) and not versions[f"slurmctld:{c.host}"].at_least(
        25
    )
    assert await run.roles.jobs() == before
    run.go.touch()
    await c.wait_job(run.spanning, "COMPLETED", timeout=60)
    assert await finished_record(c, run.spanning) == ("COMPLETED", "0:0")


@pytest.mark.parametrize(
    "run", [{"slurmctld": ["-c"]}], indirect=True, ids=["slurmctld"]
)  # slurmctld's own "clear all previous state"
async def test_a_new_slurmctld_that_comes_up_without_its_jobs_is_rolled_back(run: Run) -> None:
    c = run.cluster
    before = await run.submit()
    up = run.upgrade()
    assert await up.run() == "rolled_back"
    detail = up.status.stage("slurmctld").detail
    assert "missing jobs" in detail and str(run.spanning) in detail
    assert await run.roles.jobs() == before  # the saved state, with its running job
    run.go.touch()
    await c.wait_job(run.spanning, "COMPLETED", timeout=60)
    assert await finished_record(c, run.spanning) == ("COMPLETED", "0:0")


async def test_a_slurmdbd_failing_its_conversion_halts_with_its_backup_and_loses_no_record(run: Run) -> None:
    c = run.cluster
    assert c.database is not None
    before = await run.submit()
    # the database user may no longer change tables: the new slurmdbd's conversion fails
    await c.database.sql(f"REVOKE ALTER ON `{c.database.name}`.* FROM '{c.database.user}'@'127.0.0.1';")
    up = run.upgrade()
    assert await up.run() == "failed"
    assert _states(up) == {
        "preflight": "done",
        "slurmdbd": "failed",
        "slurmctld": "pending",
        "workers": "pending",
    }
    detail = up.status.stage("slurmdbd").detail
    assert "not rolled back" in detail and up.status.backup in detail
    # slurmctld was never touched and still has every job; the job ends while slurmdbd is down
    assert await run.roles.jobs() == before
    run.go.touch()
    await c.wait_job(run.spanning, "COMPLETED", timeout=60)
    # the operator's way back (docs/upgrades.md): the backup loaded, the old slurmdbd started on it;
    # slurmctld then sends the records it queued
    await c.database.sql(f"GRANT ALTER ON `{c.database.name}`.* TO '{c.database.user}'@'127.0.0.1';")
    await run.roles.restore_database(up.status.backup)
    assert (await run.roles.versions())["slurmdbd"].at_least(24, 11)
    assert not (await run.roles.versions())["slurmdbd"].at_least(25)
    assert await finished_record(c, run.spanning) == ("COMPLETED", "0:0")


@pytest.mark.parametrize("run", [{"slurmd": ["-f", "{dir}/etc/refused.conf"]}], indirect=True, ids=["slurmd"])
async def test_a_worker_that_never_comes_back_stops_the_roll_left_drained(run: Run) -> None:
    c = run.cluster
    (c.dir / "etc" / "refused.conf").write_text(c.conf_path.read_text() + "NoSuchSetting=1\n")
    before = await run.submit()
    run.go.touch()  # nothing to wait for on the workers: the failure is the slurmd's own
    await c.wait_job(run.spanning, "COMPLETED", timeout=60)
    up = run.upgrade()
    assert await up.run() == "failed"
    assert _states(up) == {"preflight": "done", "slurmdbd": "done", "slurmctld": "done", "workers": "failed"}
    assert "worker n1 did not come back" in up.status.stage("workers").detail
    n1 = await c.client().node("n1")
    n2 = await c.client().node("n2")
    assert n1 is not None and n1.state.drain and n1.reason is not None
    assert n1.reason.text.startswith("slurm-sidecars: upgrade")
    assert n2 is not None and not n2.state.drain  # the budget of one: the roll stopped at n1
    after = await run.roles.jobs()
    assert set(before) <= set(after) and after[run.held] == "PENDING"
    assert await finished_record(c, run.spanning) == ("COMPLETED", "0:0")


async def test_pause_holds_the_upgrade_between_stages_and_resume_goes_on(run: Run) -> None:
    await run.submit()
    run.go.touch()
    await run.cluster.wait_job(run.spanning, "COMPLETED", timeout=60)
    up = run.upgrade()
    paused_at: asyncio.Future[dict[str, str]] = asyncio.get_running_loop().create_future()

    def pause_after_preflight(stage: str, state: str, message: str) -> None:
        if (stage, state) == ("preflight", "done"):
            up.pause()
        if stage == "slurmdbd" and "paused" in message and not paused_at.done():
            paused_at.set_result(_states(up))

    run.on_event = pause_after_preflight
    task = asyncio.create_task(up.run(), name="cluster-upgrade-test")
    states = await within(paused_at, 60)
    assert states == {
        "preflight": "done",
        "slurmdbd": "pending",
        "slurmctld": "pending",
        "workers": "pending",
    }
    assert up.status.state == "paused"
    assert (await run.roles.versions())["slurmdbd"].at_least(24, 11)
    assert not task.done()
    up.resume()
    assert await task == "complete"
