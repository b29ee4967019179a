"""The dry run's state: a shadow of the live StateSaveLocation kept in step, never the live one
written, and a change paying only for what changed (the job directories are not re-created)."""

from __future__ import annotations

import os
from pathlib import Path

from sidecars.configsync.shadow import ShadowState


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
