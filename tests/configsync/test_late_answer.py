"""A `scontrol reconfigure` whose answer is late (a loaded host, 24.11's new slurmctld starting) is
no refusal: what slurmctld then runs decides the verdict, never a guess from the missing answer."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from sidecars.devcluster import DevCluster
from tests.configsync.harness import config_sync, set_sha

# long enough for slurmctld to take the set on a loaded machine, short enough for a test: the
# reconfigure is given this long to answer, then the verification as long again
RESTART_SECONDS = 8.0


def silent_reconfigure(cluster: DevCluster, tmp_path: Path, *, sends: bool) -> Path:
    """A directory whose `scontrol reconfigure` never answers: it asks slurmctld first (`sends`), or
    asks nothing at all. Every other scontrol command is the cluster's own."""
    real = shutil.which("scontrol", path=cluster.env["PATH"])
    assert real is not None
    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)
    shim = tmp_path / "bin" / "scontrol"
    shim.parent.mkdir()
    ask = f'"{real}" "$@" || exit $?; ' if sends else ""
    shim.write_text(
        f'#!/bin/sh\ncase "$*" in\n  *reconfigure*) {ask}exec cat "{fifo}";;\nesac\nexec "{real}" "$@"\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return shim.parent


def max_time(files: dict[str, bytes], minutes: int) -> dict[str, bytes]:
    changed = dict(files)
    changed["slurm.conf"] = files["slurm.conf"].replace(b"MaxTime=INFINITE", f"MaxTime={minutes}".encode())
    return changed


@pytest.mark.releases("slurm24")  # config-sync's reading of a missing answer, not Slurm's: one release
@pytest.mark.parametrize("sends", [True, False], ids=["slurmctld-took-it", "slurmctld-never-asked"])
async def test_a_reconfigure_that_answers_late_is_judged_by_what_slurmctld_runs(
    cluster: DevCluster, tmp_path: Path, sends: bool
) -> None:
    shims = silent_reconfigure(cluster, tmp_path, sends=sends)
    async with config_sync(cluster, path_first=shims, restart_timeout_seconds=RESTART_SECONDS) as sync:
        files = max_time(sync.good(), 21)
        sync.config.write(files)
        key = "applied" if sends else "rejected"
        st = await sync.wait(set_sha(files), key=key, within=4 * RESTART_SECONDS + 30.0)
        running = (await cluster.client().partitions())[0].max_time_minutes
    if sends:  # taken without an answer: applied, as what slurmctld runs shows
        assert st["applied"]["generation"] == 2 and st["rejected"] is None and running == 21
    else:  # never asked: rolled back, naming the silence and what slurmctld runs instead
        assert st["applied"]["generation"] == 1 and running != 21
        assert "no answer within" in st["rejected"]["reason"] and "MaxTime is" in st["rejected"]["reason"]
