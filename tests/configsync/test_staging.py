"""The target is always one whole set: swaps are atomic, and a crash at any step recovers to the old
or the new set entirely. No Slurm needed here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sidecars.configsync.fileset.sources import FileEntry, FileSet, read_sources
from sidecars.configsync.fileset.stage import Applied, LastKnownGood, Target
from sidecars.devcluster.volume import AtomicVolume
from tests.configsync.filesets import NEW, OLD, STEPS, Crash, fileset, seen


@pytest.mark.parametrize("step", STEPS)
def test_crash_at_any_step_recovers_to_one_whole_set(tmp_path: Path, step: str) -> None:
    target = tmp_path / "etc"
    target.mkdir()
    (target / "slurm.conf").write_bytes(OLD["slurm.conf"])  # a plain file before the first sync
    Target(target).swap(fileset(OLD), 1)
    assert seen(target).sha256 == fileset(OLD).sha256

    def crash(at: str) -> None:
        if at == step:
            raise Crash(at)

    with pytest.raises(Crash):
        Target(target, crash).swap(fileset(NEW), 2)
    Target(target).recover()  # what the sidecar does first when it starts again
    after = seen(target).sha256
    assert after in {fileset(OLD).sha256, fileset(NEW).sha256}
    assert after == (fileset(OLD) if step == "written" else fileset(NEW)).sha256
    assert not [e for e in os.listdir(target) if e.startswith("..tmp")]
    assert len([e for e in os.listdir(target) if e.startswith("..sync_")]) == 1


def test_swap_keeps_modes_and_makes_key_files_0600(tmp_path: Path) -> None:
    files = FileSet.build(
        [
            FileEntry("slurm.conf", b"a=b\n", 0o644, 4, tmp_path),
            FileEntry("plugstack.conf", b"\n", 0o640, 1, tmp_path),
            FileEntry("munge.key", b"\x00\x01", 0o644, 2, tmp_path),  # named like a key: a key
            FileEntry("jwt_hs256", b"k", 0o600, 1, tmp_path),  # unreadable by others: a Secret's file
        ]
    )
    Target(tmp_path).swap(files, 1)
    mode = {n: (tmp_path / n).stat().st_mode & 0o777 for n in files.files}
    assert mode == {"slurm.conf": 0o644, "plugstack.conf": 0o640, "munge.key": 0o600, "jwt_hs256": 0o600}


def test_kubelet_volume_reads_the_snapshot_and_skips_its_machinery(tmp_path: Path) -> None:
    vol = AtomicVolume(tmp_path / "cm")
    vol.write({"slurm.conf": "a=1\n", "gres.conf": "b\n"})
    first = read_sources([vol.path], 1 << 20)
    assert sorted(first.files) == ["gres.conf", "slurm.conf"] and not first.problems
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "slurm.conf").write_text("a=1\n")
    (plain / "gres.conf").write_text("b\n")
    assert read_sources([plain], 1 << 20).sha256 == first.sha256  # names and contents only
    vol.write({"slurm.conf": "a=2\n"})
    second = read_sources([vol.path], 1 << 20)
    assert sorted(second.files) == ["slurm.conf"] and second.sha256 != first.sha256
    assert sorted(os.listdir(vol.path)) == sorted(["..data", os.readlink(vol.path / "..data"), "slurm.conf"])


def test_last_known_good_survives_a_restart_and_is_private(tmp_path: Path) -> None:
    store = LastKnownGood(tmp_path / "state")
    files = fileset({"slurm.conf": b"x=1\n", "slurm.key": b"\xff\x00secret"}, 0o600)
    store.save(Applied(7, "2026-11-30T00:00:00Z", files))
    loaded = LastKnownGood(tmp_path / "state").load()
    assert loaded is not None and loaded.generation == 7 and loaded.files.sha256 == files.sha256
    assert loaded.files.files["slurm.key"].data == b"\xff\x00secret"
    assert store.path.stat().st_mode & 0o777 == 0o600
    store.path.write_text("{not json")
    assert LastKnownGood(tmp_path / "state").load() is None


def test_a_target_not_made_yet_is_made_at_recovery_and_takes_a_set(tmp_path: Path) -> None:
    # a Kubernetes emptyDir starts empty: the directory slurmctld reads below it does not exist yet
    target = Target(tmp_path / "empty-dir" / "slurm")
    (tmp_path / "empty-dir").mkdir()
    target.recover()
    assert target.path.is_dir()
    target.swap(fileset(NEW), 1)
    assert seen(target.path).sha256 == fileset(NEW).sha256
