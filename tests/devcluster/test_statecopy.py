"""The upgrade's state copy: a pass after slurmctld stopped costs what changed since the pass made
while it ran, not the state's size, and the copy is still exact, on files and on a real slurmctld's
StateSaveLocation."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from sidecars.devcluster import ClusterSpec, DevCluster, Release
from sidecars.devcluster.statecopy import FRESH_NS, StateMirror


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every entry under root: a file's bytes, None for a directory."""
    found: dict[str, bytes | None] = {}
    for here, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(here, name), root)] = None
        for name in files:
            found[os.path.relpath(os.path.join(here, name), root)] = Path(here, name).read_bytes()
    return found


def _age(root: Path, seconds: float) -> None:
    """Every entry's times set `seconds` back: a state written long before the pass."""
    then = time.time() - seconds
    for here, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            os.utime(os.path.join(here, name), (then, then))
    os.utime(root, (then, then))


def _state(root: Path, jobs: int) -> Path:
    """A StateSaveLocation's shape: hash.N/job.ID/{script,environment} beside top-level files,
    written a minute ago; root."""
    for i in range(jobs):
        d = root / f"hash.{i % 10}" / f"job.{i}"
        d.mkdir(parents=True)
        (d / "script").write_text(f"#!/bin/sh\necho {i}\n")
        (d / "environment").write_bytes(b"A=%d\0" % i)
    (root / "job_state").write_bytes(b"jobs v1")
    (root / "node_state").write_bytes(b"nodes v1")
    _age(root, 60)
    return root


def _replace(path: Path, data: bytes) -> None:
    """As slurmctld saves a state file: a new one written, then renamed over the old."""
    new = path.with_name(path.name + ".new")
    new.write_bytes(data)
    os.replace(new, path)


@pytest.mark.timeout(60)
def test_a_pass_after_the_first_lists_only_what_changed_and_copies_it_exactly(tmp_path: Path) -> None:
    src, dest = _state(tmp_path / "state", 300), tmp_path / "copy"
    mirror = StateMirror(src, dest)
    first = mirror.sync()
    assert first.dirs_listed == 1 + 10 + 300 and first.files_copied == 602
    assert _tree(dest) == _tree(src)

    # what a controller does between the pass while it runs and its stop: a state file saved, a
    # finished job's directory purged, a new job's written
    _replace(src / "job_state", b"jobs v2")
    (src / "hash.3" / "job.3" / "script").unlink()
    (src / "hash.3" / "job.3" / "environment").unlink()
    (src / "hash.3" / "job.3").rmdir()
    (src / "hash.4" / "job.300").mkdir()
    (src / "hash.4" / "job.300" / "script").write_text("#!/bin/sh\necho new\n")
    second = mirror.sync()
    assert _tree(dest) == _tree(src)
    # the top, the two hash directories whose entries changed and the new job's: not the 299 others
    assert second.dirs_listed == 4, second
    assert second.files_copied == 2 and second.removed == 1

    nothing = mirror.sync()
    assert nothing.files_copied == 0 and nothing.removed == 0
    assert _tree(dest) == _tree(src)


@pytest.mark.timeout(60)
def test_a_file_young_at_a_pass_is_compared_again_though_its_directory_did_not_change(
    tmp_path: Path,
) -> None:
    src, dest = _state(tmp_path / "state", 20), tmp_path / "copy"
    job = src / "hash.5" / "job.5"
    # a job's script still being written when the pass reads it: the directory's time is old,
    # the file's is now
    (job / "script").write_text("#!/bin/sh\n")
    os.utime(job, ns=(time.time_ns() - 2 * FRESH_NS,) * 2)
    mirror = StateMirror(src, dest)
    mirror.sync()
    before = os.stat(job).st_mtime_ns
    with (job / "script").open("a") as f:  # the rest written in place: the directory's time stays
        f.write("echo the rest of it\n")
    assert os.stat(job).st_mtime_ns == before
    mirror.sync()
    assert (dest / "hash.5" / "job.5" / "script").read_text() == "#!/bin/sh\necho the rest of it\n"
    assert _tree(dest) == _tree(src)


@pytest.mark.timeout(60)
def test_a_directory_replaced_by_another_of_the_same_name_is_listed_again(tmp_path: Path) -> None:
    src, dest = _state(tmp_path / "state", 20), tmp_path / "copy"
    mirror = StateMirror(src, dest)
    mirror.sync()
    job = src / "hash.7" / "job.7"
    for f in job.iterdir():
        f.unlink()
    job.rmdir()
    job.mkdir()  # a job id used again after a purge: another directory, another inode
    (job / "script").write_text("#!/bin/sh\necho again\n")
    mirror.sync()
    assert _tree(dest) == _tree(src)


async def _settled(state: Path) -> None:
    """Until every job's directory is older than a pass takes for settled (a state of before)."""
    deadline = time.monotonic() + 30
    while True:
        newest = max(os.stat(p).st_mtime_ns for p in [*state.glob("hash.*/job.*"), *state.glob("hash.*")])
        if time.time_ns() - newest > FRESH_NS:
            return
        assert time.monotonic() < deadline, "slurmctld kept writing its jobs' directories"
        await asyncio.sleep(0.2)


@pytest.mark.timeout(240)
@pytest.mark.releases("slurm24")  # the state the upgrade copies is 24.11's
async def test_the_copy_after_the_stop_is_the_stopped_controllers_state(release: Release) -> None:
    async with DevCluster(release, ClusterSpec(nodes=1, max_job_count=2_000)) as c:
        first = await c.submit_held(300)
        state = c.dir / "state"
        await _settled(state)
        mirror = StateMirror(state, c.dir / "copy")
        mirror.sync()  # while it runs: a head start
        # changes after the head start: new jobs (new directories), one cancelled (purged later)
        later = await c.submit_held(40)
        await c.scancel(first[0])
        await c.wait_job(first[0], "CANCELLED", timeout=60)
        await c.stop_slurmctld()  # saves its state
        final = mirror.sync()
        assert _tree(c.dir / "copy") == _tree(state)
        assert final.dirs_listed < 100, final  # not the 340 jobs' directories
        assert {f"job.{j}" for j in later} <= {p.name for p in state.glob("hash.*/job.*")}
