"""The dry run's state: a shadow of the live StateSaveLocation kept in step, never the live one
written, and a change paying only for what changed (the job directories are not re-created)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from sidecars.configsync.dryrun.shadow import ShadowState


def make_live(root: Path, jobs: range) -> Path:
    live = root / "live"
    live.mkdir()
    (live / "job_state").write_bytes(b"jobs" * 100)
    (live / "node_state").write_bytes(b"nodes")
    for j in jobs:
        add_job(live, j)
    return live


def add_job(live: Path, j: int) -> None:
    d = live / f"hash.{j % 10}" / f"job.{j}"
    d.mkdir(parents=True)
    (d / "script").write_text("#!/bin/sh\n")
    (d / "environment").write_text("A=1\n")


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under root with its size and mtime: what a write would change."""
    out = {}
    for here, dirs, names in os.walk(root):
        for n in [*dirs, *names]:
            st = os.stat(os.path.join(here, n), follow_symlinks=False)
            out[os.path.relpath(os.path.join(here, n), root)] = (st.st_size, st.st_mtime_ns)
    return out


def shape(root: Path) -> set[str]:
    return {
        os.path.relpath(os.path.join(here, n), root)
        for here, dirs, names in os.walk(root)
        for n in [*dirs, *names]
    }


def synced(shadow: ShadowState) -> tuple[int, int]:
    """One sync, the live directory only read by it: (job dirs mirrored, job dirs removed)."""
    before = tree(shadow.live)
    stats = shadow.sync()
    assert tree(shadow.live) == before
    assert shape(shadow.path) == shape(shadow.live)
    assert (shadow.path / "job_state").read_bytes() == (shadow.live / "job_state").read_bytes()
    return stats.mirrored, stats.removed


def test_the_shadow_follows_the_live_state_paying_only_for_changes(tmp_path: Path) -> None:
    live = make_live(tmp_path, range(1, 301))
    shadow = ShadowState(live, tmp_path / "shadow")
    assert synced(shadow) == (300, 0)
    assert (shadow.path / "hash.1" / "job.1" / "script").stat().st_size == 0  # never read by the dry run
    assert synced(shadow) == (0, 0)  # nothing changed: no job directory made again
    # one job more, one fewer
    add_job(live, 301)
    for f in (live / "hash.2" / "job.2").iterdir():
        f.unlink()
    (live / "hash.2" / "job.2").rmdir()
    assert synced(shadow) == (1, 1)
    # what the throwaway did to its copy (saved state, purged a job it called defunct, a new dir)
    (shadow.path / "job_state").write_bytes(b"the throwaway's")
    (shadow.path / "last_tres").write_bytes(b"x")
    for f in (shadow.path / "hash.3" / "job.3").iterdir():
        f.unlink()
    (shadow.path / "hash.3" / "job.3").rmdir()
    (shadow.path / "hash.4" / "job.999").mkdir()
    (shadow.path / "hash.77").mkdir()
    assert synced(shadow) == (1, 1)


def test_a_job_directory_still_being_written_is_looked_at_again(tmp_path: Path) -> None:
    live = make_live(tmp_path, range(0))
    d = live / "hash.5" / "job.5"
    d.mkdir(parents=True)
    (d / "script").write_text("#!/bin/sh\n")  # the environment is not there yet
    shadow = ShadowState(live, tmp_path / "shadow")
    shadow.sync()
    (d / "environment").write_text("A=1\n")
    shadow.sync()
    assert (shadow.path / "hash.5" / "job.5" / "environment").exists()


def test_a_missing_live_state_gives_an_empty_one(tmp_path: Path) -> None:
    shadow = ShadowState(tmp_path / "nowhere", tmp_path / "shadow")
    stats = shadow.sync()
    assert stats.files == 0 and shadow.path.is_dir() and not list(shadow.path.iterdir())


def test_a_restarted_config_sync_adopts_the_shadow_it_left(tmp_path: Path) -> None:
    live = make_live(tmp_path, range(1, 201))
    assert synced(ShadowState(live, tmp_path / "shadow")) == (200, 0)
    # while no config-sync ran: one job more, one gone, and a shadow directory left half made
    add_job(live, 201)
    for f in (live / "hash.2" / "job.2").iterdir():
        f.unlink()
    (live / "hash.2" / "job.2").rmdir()
    (tmp_path / "shadow" / "hash.5" / "job.5" / "environment").unlink()
    again = ShadowState(live, tmp_path / "shadow")  # a new process: nothing in memory
    assert synced(again) == (2, 1)  # job.201 made and job.5 remade; job.2 removed; 198 kept as found
    assert synced(again) == (0, 0)


class Clock:
    """The shadow's wall clock, moved on by the test instead of waiting for mtimes to age."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def later(self, seconds: float = 60.0) -> None:
        self.now += seconds


def test_a_quiet_state_costs_no_listing_and_no_copy(tmp_path: Path) -> None:
    """What a change pays does not grow with the jobs: nothing changed, nothing listed or copied."""
    live = make_live(tmp_path, range(1, 301))
    clock = Clock()
    shadow = ShadowState(live, tmp_path / "shadow", clock=clock)
    first = shadow.sync()
    assert (first.listed, first.files, first.mirrored) == (10, 2, 300)
    clock.later()
    assert synced(shadow) == (0, 0)  # looked at once more: the first look was within a clock tick
    clock.later()
    quiet = shadow.sync()
    assert (quiet.listed, quiet.files, quiet.mirrored, quiet.removed) == (0, 0, 0, 0)
    assert shape(shadow.path) == shape(live)


def test_a_shadow_that_skips_is_never_stale(tmp_path: Path) -> None:
    """Whatever changed on either side since the quiet sync is seen: a job made or gone in the live
    state, a state file the live slurmctld saved again, what the throwaway replaced or removed."""
    live = make_live(tmp_path, range(1, 301))
    clock = Clock()
    shadow = ShadowState(live, tmp_path / "shadow", clock=clock)
    for _ in range(2):
        shadow.sync()
        clock.later()
    add_job(live, 303)  # into hash.3
    stats = shadow.sync()
    assert (stats.listed, stats.mirrored) == (1, 1) and shape(shadow.path) == shape(live)
    clock.later()
    # the live slurmctld saves its state (a new file, as Slurm writes it) and a job goes
    (live / "job_state.new").write_bytes(b"newer jobs")
    os.replace(live / "job_state.new", live / "job_state")
    for f in (live / "hash.7" / "job.7").iterdir():
        f.unlink()
    (live / "hash.7" / "job.7").rmdir()
    assert synced(shadow) == (0, 1)
    clock.later()
    shadow.sync()
    clock.later()
    # the throwaway saved its own state, removed a copy, purged a job and made a directory
    (shadow.path / "job_state.new").write_bytes(b"the throwaway's")
    os.replace(shadow.path / "job_state.new", shadow.path / "job_state")
    (shadow.path / "node_state").unlink()
    for f in (shadow.path / "hash.4" / "job.4").iterdir():
        f.unlink()
    (shadow.path / "hash.4" / "job.4").rmdir()
    (shadow.path / "hash.5" / "job.999").mkdir()
    assert synced(shadow) == (1, 1)
    assert (shadow.path / "node_state").read_bytes() == (live / "node_state").read_bytes()


def test_a_change_within_a_clock_tick_of_the_last_look_is_looked_at_again(tmp_path: Path) -> None:
    """An mtime is trusted only once it is older than the look that saw it by RACY_SECONDS: a
    filesystem with coarse timestamps could leave a directory changed just after the look unmoved."""
    live = make_live(tmp_path, range(1, 101))
    clock = Clock()
    shadow = ShadowState(live, tmp_path / "shadow", clock=clock)
    shadow.sync()
    again = shadow.sync()  # no time has passed since the mtimes it saw
    assert again.listed == 10 and again.files == 2
