"""A `sacctmgr reconfigure` or `sacctmgr shutdown` whose answer is late (a loaded host, a slurmdbd
busy writing) is no refusal: what slurmdbd then does decides, never a guess from the missing answer.
The reconfigure is asked again once slurmdbd answers (a re-read of the file in place is harmless
twice; an answered one is a fact); the shutdown's restart is judged by slurmdbd being gone and back."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from sidecars.devcluster import DevCluster
from tests.configsync.test_dbdsync import CONF, _with, dbd_sync

# long enough for slurmdbd to re-read or restart on a loaded machine, short enough for a test: a
# command is given this long to answer, then slurmdbd as long again
RESTART_SECONDS = 10.0


def late_once(cluster: DevCluster, tmp_path: Path, command: str, *, sends: bool) -> Path:
    """A directory whose `sacctmgr <command>` never answers the first time it is asked: it asks
    slurmdbd first (`sends`), or asks nothing at all. Every later call, and every other sacctmgr
    command, is the cluster's own."""
    real = shutil.which("sacctmgr", path=cluster.env["PATH"])
    assert real is not None
    fifo, once = tmp_path / "never-written", tmp_path / "late-once"
    os.mkfifo(fifo)
    shim = tmp_path / "bin" / "sacctmgr"
    shim.parent.mkdir()
    ask = f'"{real}" "$@" || exit $?; ' if sends else ""
    shim.write_text(
        "#!/bin/sh\n"
        f'case "$*" in\n  *{command}*)\n'
        f'    [ -e "{once}" ] || {{ : > "{once}"; {ask}exec cat "{fifo}"; }};;\nesac\n'
        f'exec "{real}" "$@"\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return shim.parent


@pytest.mark.timeout(300)
@pytest.mark.releases("slurm26")  # config-sync's reading of a missing answer, not Slurm's: one release
@pytest.mark.cluster(nodes=1, accounting=True)
@pytest.mark.parametrize(
    ("command", "sends"),
    [("reconfigure", True), ("reconfigure", False), ("shutdown", True)],
    ids=["reconfigure-taken", "reconfigure-never-asked", "shutdown-taken"],
)
async def test_a_late_answer_is_judged_by_what_slurmdbd_does(
    cluster: DevCluster, tmp_path: Path, command: str, sends: bool
) -> None:
    c = cluster
    shims = late_once(c, tmp_path, command, sends=sends)
    async with dbd_sync(
        c, restart_policy="restart", restart_timeout_seconds=RESTART_SECONDS, path_first=shims
    ) as h:
        within = 6 * h.service.settings.restart_timeout_seconds  # generous: a loaded machine
        await h.service.wait_until(lambda st: st["applied"] is not None, within)
        pid = c.hostpid("slurmdbd")
        # a key slurmdbd re-reads (a reconfigure), or one it reads at start (a restart)
        line = "PurgeStepAfter=12months" if command == "reconfigure" else "CommitDelay=1"
        change = {CONF: _with(h.original, line)}
        h.secret.write(change)
        st = await h.outcome(change, "applied", within + 60.0)
        assert st["applied"]["generation"] == 2 and st["rejected"] is None, st["rejected"]
        assert (tmp_path / "late-once").exists()  # the late answer did happen
        assert h.live.read_bytes() == change[CONF] and await c.client().accounting_ping()
        if command == "reconfigure":
            assert c.hostpid("slurmdbd") == pid  # re-read in place, never restarted
        else:
            assert c.hostpid("slurmdbd") not in (None, pid)
