"""A cancelled watch is not the daemon stopping: watchfiles sets the event it is given when its
generator is cancelled (to end its thread), so the watch must never hand it the daemon's own."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sidecars.configsync.fileset.watch import watch
from sidecars.runtime.waits import until_set


async def test_cancelling_the_watch_leaves_stop_unset(tmp_path: Path) -> None:
    stop, ready = asyncio.Event(), asyncio.Event()
    woken: list[int] = []
    task = asyncio.ensure_future(watch([tmp_path], lambda: woken.append(1), stop, ready))
    await until_set(ready, 10)
    (tmp_path / "slurm.conf").write_text("ClusterName=x\n")
    async with asyncio.timeout(10):
        while not woken:  # the watch runs: it saw the write
            await asyncio.sleep(0.02)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert not stop.is_set()


async def test_stop_ends_the_watch(tmp_path: Path) -> None:
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.ensure_future(watch([tmp_path], lambda: None, stop, ready))
    await until_set(ready, 10)
    stop.set()
    async with asyncio.timeout(10):
        await task
