"""`slurm-sidecars state copy|restore` as a Job runs it (its process, its exit code, its one line):
a copy is checked against the state, kept with a manifest, never written over; a restore puts back
exactly the copy, leaves the copies' directory inside the state alone, and refuses a damaged copy
before it touches the state."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)


def state(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecars", "state", *argv],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def tree(root: Path, skip: str = "") -> dict[str, str]:
    return {
        str(p.relative_to(root)): "->" + os.readlink(p)
        if p.is_symlink()
        else p.read_text()
        if p.is_file()
        else "/"
        for p in sorted(root.rglob("*"))
        if not skip or not str(p.relative_to(root)).startswith(skip)
    }


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    s = tmp_path / "state"
    (s / "hash.3").mkdir(parents=True)
    (s / "job_state").write_text("jobs")
    (s / "hash.3" / "job.1003").write_text("script")
    (s / "last_config").symlink_to("job_state")
    return tmp_path


def test_a_copy_is_checked_kept_with_its_manifest_and_never_written_over(volume: Path) -> None:
    s, copy = volume / "state", volume / ".copies" / "one"
    done = state("copy", "--state-dir", str(s), "--copy-dir", str(copy))
    assert done.returncode == 0, done.stderr
    assert tree(copy) == tree(s)
    assert (volume / ".copies" / "one.manifest.json").is_file()
    again = state("copy", "--state-dir", str(s), "--copy-dir", str(copy))
    assert again.returncode == 1 and again.stderr.count("\n") == 1
    assert "exists already" in again.stderr


def test_a_restore_puts_back_the_copy_and_keeps_the_copies_inside_the_state(volume: Path) -> None:
    s = volume / "state"
    copy = s / ".slurm-sidecars-upgrade" / "state-1"  # the volume's root is the StateSaveLocation
    assert state("copy", "--state-dir", str(s), "--copy-dir", str(copy)).returncode == 0
    before = tree(s, skip=".slurm-sidecars-upgrade")
    assert ".slurm-sidecars-upgrade" not in tree(copy)  # the copy holds no copy of itself
    (s / "job_state").write_text("a newer release's jobs")
    (s / "hash.3" / "job.1003").unlink()
    (s / "resv_state").write_text("new")
    done = state("restore", "--state-dir", str(s), "--copy-dir", str(copy))
    assert done.returncode == 0, done.stderr
    assert tree(s, skip=".slurm-sidecars-upgrade") == before
    assert copy.is_dir()


def test_a_damaged_copy_is_refused_before_the_state_is_touched(volume: Path) -> None:
    s, copy = volume / "state", volume / "copy"
    assert state("copy", "--state-dir", str(s), "--copy-dir", str(copy)).returncode == 0
    (copy / "hash.3" / "job.1003").write_text("bit rot")
    (s / "job_state").write_text("the state now")
    now = tree(s)
    done = state("restore", "--state-dir", str(s), "--copy-dir", str(copy))
    assert (
        done.returncode == 1
        and "differs from what was copied" in done.stderr
        and "hash.3/job.1003" in done.stderr
    )
    assert tree(s) == now
    gone = state("restore", "--state-dir", str(s), "--copy-dir", str(volume / "none"))
    assert gone.returncode == 1 and "no readable manifest" in gone.stderr
