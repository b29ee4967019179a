"""config-sync's root tasks (the watch, the sync loop, the dry run's state kept in step) are guarded:
one that dies fails liveness naming it, and the daemon's wait ends with the failure (exit 1), instead
of never syncing again."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from sidecars.configsync import main as configsync_main
from sidecars.configsync.dryrun.runner import DryRunner
from sidecars.configsync.service.daemon import ConfigSync
from sidecars.devcluster import DevCluster
from sidecars.runtime.tasks import RootTaskFailed, until_stopped
from sidecars.runtime.waits import within
from tests.configsync.harness import config_sync
from tests.helpers import dies_when_armed, eventually


@pytest.mark.cluster(nodes=1)
@pytest.mark.releases("slurm24")  # a task's guard is ours, not Slurm's: one release shows it
@pytest.mark.parametrize("task", ["watch", "sync_loop", "dry_run_state"])
async def test_a_root_task_that_dies_is_reported(
    cluster: DevCluster, monkeypatch: pytest.MonkeyPatch, task: str
) -> None:
    armed = asyncio.Event()  # until set, the real task runs (the start-up sync depends on the watch)
    if task == "watch":
        monkeypatch.setattr(configsync_main, "watch", dies_when_armed(configsync_main.watch, armed, task))
    elif task == "dry_run_state":
        monkeypatch.setattr(DryRunner, "keep_state", dies_when_armed(DryRunner.keep_state, armed, task))
    else:
        monkeypatch.setattr(ConfigSync, "run", dies_when_armed(ConfigSync.run, armed, task))

    async def livez(port: int) -> tuple[int, Any]:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/livez") as r:
            return r.status, await r.json()

    async with config_sync(cluster) as sync:
        port = sync.running.port
        status, body = await livez(port)
        assert status == 200 and body["checks"]["root_tasks"]["ok"], body
        armed.set()
        _, body = await eventually(lambda: livez(port), lambda r: r[0] == 503, what="livez 503")
        assert body["checks"]["root_tasks"]["detail"] == f"{task} ended: RuntimeError: injected into {task}"
        with pytest.raises(RootTaskFailed, match=task):
            await within(until_stopped(asyncio.Event(), sync.running.tasks), 10)
