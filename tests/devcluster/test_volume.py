"""The kubelet's atomic-writer layout, reproduced: readers only ever see whole versions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sidecars.devcluster.volume import AtomicVolume


def test_layout_matches_the_kubelet(tmp_path: Path) -> None:
    vol = AtomicVolume(tmp_path / "cm")
    first = vol.write({"slurm.conf": "A=1\n", "gres.conf": "Name=gpu\n"})
    root = tmp_path / "cm"
    assert os.readlink(root / "..data") == first.name and first.name.startswith("..20")
    assert os.readlink(root / "slurm.conf") == "..data/slurm.conf"
    assert (root / "slurm.conf").read_text() == "A=1\n"
    second = vol.update({"slurm.conf": "A=2\n", "gres.conf": None, "new.conf": "x\n"})
    assert os.readlink(root / "..data") == second.name
    assert not first.exists()  # the old version is removed after the swap
    assert not (root / "gres.conf").exists() and (root / "new.conf").read_text() == "x\n"
    assert sorted(p.name for p in root.iterdir()) == sorted(["..data", second.name, "slurm.conf", "new.conf"])


def test_secret_mode_and_bad_names(tmp_path: Path) -> None:
    vol = AtomicVolume(tmp_path / "secret", mode=0o600)
    stamp = vol.write({"munge.key": b"\x00\x01"})
    assert (stamp / "munge.key").stat().st_mode & 0o777 == 0o600
    with pytest.raises(ValueError, match="bad file name"):
        vol.write({"../escape": "x"})
