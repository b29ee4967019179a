"""config-guard: a set swapped in unverified is marked, the verified one kept beside it, and the
guard slurmctld's entrypoint runs puts the verified one back, whatever instant it runs at. No Slurm
needed here (test_restart_window.py restarts a real slurmctld through it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sidecars.cli import self_argv
from sidecars.configsync.fileset.stage import MARKER, RESTORED, Target
from tests.configsync.filesets import NEW, OLD, STEPS, Crash, fileset, seen


def guard(target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        self_argv("config-guard", "--target", str(target)),
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def gens(target: Path) -> list[str]:
    return sorted(e for e in os.listdir(target) if e.startswith("..sync_"))


def test_an_unverified_set_is_marked_and_the_good_one_kept(tmp_path: Path) -> None:
    t = Target(tmp_path)
    t.swap(fileset(OLD), 7)
    t.swap(fileset(NEW), 8, unverified=True)
    assert seen(tmp_path).sha256 == fileset(NEW).sha256
    marker = t.unverified()
    assert marker is not None and (marker.generation, marker.good_generation) == (8, 7)
    assert len(gens(tmp_path)) == 2  # the good generation stays on disk until the verification ends
    assert t.verified()
    assert t.unverified() is None and len(gens(tmp_path)) == 1
    assert seen(tmp_path).sha256 == fileset(NEW).sha256


def test_the_guard_puts_the_good_set_back_and_config_sync_hears_of_it(tmp_path: Path) -> None:
    t = Target(tmp_path)
    t.swap(fileset(OLD), 7)
    t.swap(fileset(NEW), 8, unverified=True)
    done = guard(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "generation 8" in done.stderr and "put generation 7 back" in done.stderr
    assert seen(tmp_path).sha256 == fileset(OLD).sha256
    assert not (tmp_path / "added.conf").exists() and (tmp_path / "gone.conf").exists()
    assert t.unverified() is None and len(gens(tmp_path)) == 1
    assert not t.verified()  # config-sync's verification, ending later, must not claim it
    record = t.take_restored()
    assert record is not None and (record.restored_generation, record.unverified_generation) == (7, 8)
    assert record.by == "config-guard" and t.take_restored() is None
    again = guard(tmp_path)  # a second start finds nothing to do
    assert again.returncode == 0 and "put generation" not in again.stderr
    assert seen(tmp_path).sha256 == fileset(OLD).sha256


@pytest.mark.parametrize("step", STEPS)
def test_a_crash_at_any_step_of_an_unverified_swap_leaves_the_guard_a_good_set(
    tmp_path: Path, step: str
) -> None:
    Target(tmp_path).swap(fileset(OLD), 1)

    def crash(at: str) -> None:
        if at == step:
            raise Crash(at)

    with pytest.raises(Crash):
        Target(tmp_path, crash).swap(fileset(NEW), 2, unverified=True)
    done = guard(tmp_path)
    assert done.returncode == 0, done.stderr
    assert seen(tmp_path).sha256 == fileset(OLD).sha256
    assert not (tmp_path / MARKER).exists()


def test_a_verified_set_is_left_alone(tmp_path: Path) -> None:
    Target(tmp_path).swap(fileset(OLD), 1)
    Target(tmp_path).swap(fileset(NEW), 2)  # not marked: config-sync verified it, or no slurmctld ran yet
    before = sorted(os.listdir(tmp_path))
    done = guard(tmp_path)
    assert done.returncode == 0 and sorted(os.listdir(tmp_path)) == before
    assert seen(tmp_path).sha256 == fileset(NEW).sha256 and not (tmp_path / RESTORED).exists()


def test_a_marked_set_without_its_good_one_stops_slurmctld_from_starting(tmp_path: Path) -> None:
    t = Target(tmp_path)
    t.swap(fileset(OLD), 1)
    t.swap(fileset(NEW), 2, unverified=True)
    marker = json.loads((tmp_path / MARKER).read_text())
    os.rename(tmp_path / marker["good"], tmp_path.parent / "elsewhere")
    done = guard(tmp_path)
    assert done.returncode == 1 and "last verified set" in done.stderr and "missing" in done.stderr
    assert (tmp_path / MARKER).exists()  # nothing claimed: the next start tries again


def test_a_marker_that_is_not_one_is_refused_plainly(tmp_path: Path) -> None:
    Target(tmp_path).swap(fileset(OLD), 1)
    (tmp_path / MARKER).write_text("{not json")
    done = guard(tmp_path)
    assert done.returncode == 1 and MARKER in done.stderr


def test_a_marker_naming_a_path_outside_the_target_is_refused(tmp_path: Path) -> None:
    """`..current` follows what the marker names: only a generation directory of this target."""
    t = Target(tmp_path)
    t.swap(fileset(OLD), 1)
    t.swap(fileset(NEW), 2, unverified=True)
    marker = json.loads((tmp_path / MARKER).read_text())
    (tmp_path / MARKER).write_text(json.dumps({**marker, "good": "../../etc"}))
    done = guard(tmp_path)
    assert done.returncode == 1 and "not a generation" in done.stderr
    assert os.readlink(tmp_path / "..current") == marker["unverified"]


def test_a_missing_target_is_a_bad_invocation(tmp_path: Path) -> None:
    done = guard(tmp_path / "nope")
    assert done.returncode == 2 and "is not a directory" in done.stderr


def test_the_image_entrypoint_guards_the_directory_slurmctld_is_given(tmp_path: Path) -> None:
    """images/slurmctld-entrypoint.sh: the guard on the `-f` file's directory, then the command."""
    script = Path(__file__).parents[2] / "images" / "slurmctld-entrypoint.sh"
    t = Target(tmp_path)
    t.swap(fileset(OLD), 1)
    t.swap(fileset(NEW), 2, unverified=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("SLURM_CONF", None)
    # `test -f FILE` stands in for `slurmctld -D -f FILE`: it runs only after the guard, on the good set
    done = subprocess.run(
        ["sh", str(script), "test", "-f", str(tmp_path / "slurm.conf")],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "put generation 1 back" in done.stderr
    assert seen(tmp_path).sha256 == fileset(OLD).sha256
