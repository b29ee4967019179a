"""config-sync's HA flags as the command line gives them: `--target-read-at` names a path in
slurmctld's container, so only an absolute one means anything."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sidecars.configsync.settings import Settings, configure, from_args
from sidecars.runtime.settings import ConfigError

pytestmark = pytest.mark.timeout(30)


def _settings(tmp_path: Path, *more: str) -> Settings:
    (tmp_path / "src").mkdir(exist_ok=True)
    parser = argparse.ArgumentParser()
    configure(parser)
    base = ["--source", str(tmp_path / "src"), "--target", str(tmp_path / "etc"), "--http", "127.0.0.1:0"]
    return from_args(parser.parse_args([*base, *more]))


def test_the_target_is_named_where_slurmctld_reads_it(tmp_path: Path) -> None:
    assert _settings(tmp_path).conf_dir == tmp_path / "etc"  # by default: where config-sync writes it
    # slurmctld's container mounts the volume at /etc/slurm, which need not exist in this one
    settings = _settings(tmp_path, "--target-read-at", "/etc/slurm")
    assert settings.conf_dir == Path("/etc/slurm") and settings.target == tmp_path / "etc"


def test_a_relative_target_read_at_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--target-read-at: an absolute path is expected"):
        _settings(tmp_path, "--target-read-at", "etc/slurm")
