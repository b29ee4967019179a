"""The quiet time before a pass reads the sources: kept where a set is written file by file, skipped
where the kubelet swaps a whole set at once. Real directories, the real watcher."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from sidecars.configsync.fileset.quiet import Debouncer, swapped_whole
from sidecars.configsync.fileset.sources import read_sources
from sidecars.configsync.fileset.watch import watch
from sidecars.devcluster.volume import AtomicVolume
from sidecars.runtime.waits import within

pytestmark = pytest.mark.timeout(30)

NAMES = ["a.conf", "b.conf", "c.conf", "d.conf", "slurm.conf"]


@asynccontextmanager
async def watched(source: Path, wake: asyncio.Event) -> AsyncIterator[None]:
    """The sidecar's watcher on `source`, its watches in place before the test writes."""
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(watch([source], wake.set, stop, ready), name="test_watch")
    try:
        await within(ready.wait(), 10)
        wake.clear()
        yield
    finally:
        stop.set()
        await within(asyncio.gather(task, return_exceptions=True), 10)


async def test_a_kubelet_swap_is_read_without_waiting_for_quiet(tmp_path: Path) -> None:
    volume = AtomicVolume(tmp_path / "cm")
    volume.write({"slurm.conf": "A=1\n"})
    wake, stop = asyncio.Event(), asyncio.Event()
    # a quiet time far longer than the test may take: only skipping it lets the wait end
    quiet = Debouncer(wake, lone_seconds=600, max_seconds=600, whole=lambda: swapped_whole([volume.path]))
    async with watched(volume.path, wake):
        volume.write(dict.fromkeys(NAMES, "A=2\n"))
        await within(wake.wait(), 10)
        await within(quiet.wait(stop), 5)
    assert sorted(read_sources([volume.path], 4096).files) == NAMES


async def test_a_storm_of_kubelet_swaps_still_waits_for_quiet(tmp_path: Path) -> None:
    """A change that came while the last set was applied continues a burst: the swaps of a storm are
    batched into few reconfigures, kubelet volume or not."""
    volume = AtomicVolume(tmp_path / "cm")
    volume.write({"slurm.conf": "A=1\n"})
    wake, stop = asyncio.Event(), asyncio.Event()
    quiet = Debouncer(wake, lone_seconds=600, max_seconds=600, whole=lambda: swapped_whole([volume.path]))
    quiet.in_burst = True
    waiting = asyncio.create_task(quiet.wait(stop), name="test_quiet_wait")
    try:
        done, _ = await asyncio.wait([waiting], timeout=0.5)
        assert not done  # still waiting for the storm to go quiet
    finally:
        stop.set()
        await within(waiting, 10)


async def test_files_written_one_by_one_are_read_as_one_change(tmp_path: Path) -> None:
    source = tmp_path / "bind"
    source.mkdir()
    (source / "slurm.conf").write_text("A=1\n")
    wake, stop = asyncio.Event(), asyncio.Event()
    quiet = Debouncer(wake, lone_seconds=1.0, max_seconds=30, whole=lambda: swapped_whole([source]))
    async with watched(source, wake):
        seen: list[list[str]] = []

        async def passes() -> None:
            while True:
                await wake.wait()
                await quiet.wait(stop)
                seen.append(sorted(read_sources([source], 4096).files))

        reader = asyncio.create_task(passes(), name="test_passes")
        try:
            for name in NAMES:  # as `cp` or an editor writes them: one file, then the next
                (source / name).write_text("A=2\n")
                await asyncio.sleep(0.05)
            while not seen:
                await within(asyncio.sleep(0.05), 1)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
    assert seen[0] == NAMES  # the first pass already saw the whole set, never half of it


def test_only_sources_that_are_all_kubelet_volumes_skip_the_quiet_time(tmp_path: Path) -> None:
    volume = AtomicVolume(tmp_path / "cm")
    volume.write({"slurm.conf": "A=1\n"})
    secret = AtomicVolume(tmp_path / "secret", mode=0o600)
    secret.write({"munge.key": b"k"})
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "..data").mkdir()  # a directory of that name is no kubelet's swap
    assert swapped_whole([volume.path, secret.path])
    assert not swapped_whole([volume.path, plain])
    assert not swapped_whole([plain])
    assert not swapped_whole([])
