"""The dry run's state prepared off every change's path: the shadow is built when config-sync starts
and kept in step in the background (DryRunner.keep_state, main.py's "dry_run_state" task), a dry run
arriving meanwhile waits for the sync in flight and never loads a shadow half brought in step, and a
cancelled dry run lets go of the shadow only once its thread has finished with it."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sidecars.configsync.dryrun.runner import DryRunner
from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.devcluster import DevCluster
from sidecars.runtime import offloop
from tests.configsync.harness import config_sync, read_set, set_sha
from tests.configsync.test_dry_run_state import add_job, make_live

CONF = read_set({"slurm.conf": b"ClusterName=x\n"})


WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="dry run")


class Recording(DryRunner):
    """Each preparation of the state, in order: (who, started, ended, job dirs it mirrored)."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.syncs: list[tuple[str, float, float, int]] = []

    async def warm(self, current: SlurmConf) -> bool:
        WHO.set("background")  # this task's context, which its thread's copy carries
        return await super().warm(current)

    def prepare_state(self, live_state: Path | None, state: Path) -> None:
        who, started = WHO.get(), time.monotonic()
        super().prepare_state(live_state, state)
        mirrored = self.last_sync.mirrored if self.last_sync is not None else -1
        self.syncs.append((who, started, time.monotonic(), mirrored))


def runner(tmp_path: Path, live: Path, cls: type[DryRunner] = DryRunner) -> DryRunner:
    return cls(
        command=("/bin/false",),  # never reached in these tests' checks: the state is what is looked at
        work_dir=tmp_path / "dry-run",
        target=tmp_path / "etc",
        isolation="ports",
        state_dir=live,
        timeout=15.0,
    )


async def until(what: Callable[[], bool], why: str, dry: DryRunner) -> None:
    """Poll until `what`, generously: four times what a whole dry run may take (its settings)."""
    deadline = time.monotonic() + 4 * dry.timeout
    while not what():
        assert time.monotonic() < deadline, why
        await asyncio.sleep(0.02)


async def test_the_shadow_is_built_at_start_and_kept_in_step_between_changes(tmp_path: Path) -> None:
    live = make_live(tmp_path, range(1, 301))
    dry = runner(tmp_path, live)
    stop = asyncio.Event()
    task = asyncio.create_task(dry.keep_state(lambda: CONF, stop, 0.05), name="dry_run_state")
    try:
        await until(lambda: dry.warmed_seconds is not None, "the shadow built at start", dry)
        assert dry.shadow is not None and (dry.shadow.path / "hash.1" / "job.1").is_dir()
        # the live slurmctld takes a job and saves its state: no change, no dry run, yet the shadow
        # follows, so the next dry run's own sync has nothing of it left to do
        add_job(live, 1001)
        (live / "job_state").write_bytes(b"more jobs" * 100)
        shadow = dry.shadow.path
        await until(
            lambda: (
                (shadow / "hash.1" / "job.1001").is_dir()
                and (shadow / "job_state").read_bytes() == (live / "job_state").read_bytes()
            ),
            "the shadow kept in step in the background",
            dry,
        )
    finally:
        stop.set()
        await task


async def test_a_dry_run_arriving_during_the_build_waits_for_it(tmp_path: Path) -> None:
    """Waited for, not the old path beside it: the dry run's own sync starts once the build ended,
    and finds every job directory already there."""
    live = make_live(tmp_path, range(1, 3001))
    dry = runner(tmp_path, live, Recording)
    assert isinstance(dry, Recording)
    stop = asyncio.Event()
    task = asyncio.create_task(dry.keep_state(lambda: CONF, stop, 0), name="dry_run_state")
    try:
        await until(lambda: dry._lock.locked() or dry.warmed_seconds is not None, "the build under way", dry)
        await dry.run(CONF, None)  # /bin/false: refused, after its state was prepared
    finally:
        stop.set()
        await task
    (who, _, built, mirrored), (who2, started, _, mirrored2) = dry.syncs
    assert (who, who2) == ("background", "dry run")
    assert mirrored == 3000 and started >= built and mirrored2 == 0, dry.syncs


async def test_a_cancelled_preparation_lets_go_only_once_its_thread_ended() -> None:
    """A thread cannot be stopped: were the lock let go while it still wrote the shadow, the next
    sync would race it. The caller resumes after the thread, never before."""
    order: list[str] = []
    gate = threading.Event()

    def work() -> None:
        gate.wait(60)
        order.append("thread ended")

    async def caller() -> None:
        try:
            await offloop.whole(work)
        finally:
            order.append("caller resumed")

    task = asyncio.create_task(caller())
    await asyncio.sleep(0)  # let it start the thread
    task.cancel()
    for _ in range(10):  # a plain asyncio.to_thread would resume the caller within these
        await asyncio.sleep(0)
    gate.set()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert order == ["thread ended", "caller resumed"]


@pytest.mark.cluster(nodes=1)
async def test_config_sync_is_ready_with_the_dry_runs_state_prepared(cluster: DevCluster) -> None:
    """The shadow is built before config-sync says it is ready: the first change after that finds
    every job directory there already (its dry run's own sync mirrors none)."""
    await cluster.submit_held(50)
    async with config_sync(cluster) as sync:
        dry = sync.service.validator.dry_runner
        assert dry is not None and dry.warmed_seconds is not None  # built before ready
        assert dry.shadow is not None and len(list(dry.shadow.path.glob("hash.*/job.*"))) >= 50
        files = {**sync.good(), "slurm.conf": sync.good()["slurm.conf"] + b"\nMaxStepCount=40000\n"}
        sync.config.write(files)
        await sync.wait(set_sha(files))
        assert dry.last_sync is not None and dry.last_sync.mirrored == 0, dry.last_sync
