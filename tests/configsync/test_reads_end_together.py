"""A read made of several Slurm commands run together ends whole: when one command fails, the others
are stopped (their processes killed and reaped) before the read returns, so a daemon that stops or
restarts right after leaves no command running. CI saw config-sync's baseline read leave
`node_listing` and its process's stream readers pending after a crashed slurmctld failed the
sibling `show config`.

One command is made to fail and one to hang, deterministically: a `scontrol` first on PATH fails
`show config` at once and blocks `show node` on a FIFO nobody writes; every other call is the real
one, on the real cluster."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from pathlib import Path

import pytest

from sidecars.configsync.apply.views import view, view_if_up
from sidecars.devcluster import DevCluster
from sidecars.slurm import SlurmClient, SlurmError
from sidecars.slurm.commands import RetryPolicy

# the rule is ours (how our reads end), not Slurm's: one release shows it
pytestmark = [pytest.mark.cluster(nodes=1), pytest.mark.releases("slurm26")]


def failing_client(cluster: DevCluster, tmp_path: Path) -> SlurmClient:
    env = dict(cluster.env)
    real = shutil.which("scontrol", path=env["PATH"])
    assert real is not None
    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)
    shim = tmp_path / "bin" / "scontrol"
    shim.parent.mkdir()
    shim.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        '  *"show config"*) echo "slurm_load_ctl_conf error: Invalid user id" >&2; exit 1;;\n'
        f'  *"show node"*) exec cat "{fifo}";;\n'
        "esac\n"
        f'exec "{real}" "$@"\n'
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    env["PATH"] = f"{shim.parent}:{env['PATH']}"
    return SlurmClient(env=env, retry=RetryPolicy(attempts=1))


def others() -> list[asyncio.Task[object]]:
    me = asyncio.current_task()
    return [t for t in asyncio.all_tasks() if t is not me and not t.done()]


async def test_a_failed_read_leaves_none_of_its_commands_running(cluster: DevCluster, tmp_path: Path) -> None:
    client = failing_client(cluster, tmp_path)
    with pytest.raises(SlurmError, match="Invalid user id"):
        await view(client)
    assert others() == []  # node_listing (blocked on the FIFO) was stopped, its readers too
    assert await view_if_up(client) is None  # as config-sync reads it: slurmctld up, unreadable
    assert others() == []
