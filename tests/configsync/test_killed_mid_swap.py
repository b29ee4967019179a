"""The real config-sync process, SIGKILLed at random moments while it applies a change: whatever
the moment, the directory slurmctld reads holds one whole set (the old or the new), and the next
start brings it to the volume's set."""

from __future__ import annotations

import asyncio
import random
import re
import signal
from pathlib import Path

import pytest

from sidecars.devcluster import DevCluster
from sidecars.devcluster.volume import AtomicVolume
from sidecars.runtime.waits import within
from tests.configsync.harness import cluster_files, start_command

MARK = re.compile(rb"# set (\d+)")


def _args(cluster: DevCluster) -> tuple[str, ...]:
    # a debounce of 0.05 s, then validation, staging, the swap and the reconfigure: a kill lands anywhere
    return (
        "--state-dir",
        str(cluster.dir / "cs-state"),
        "--settle-seconds",
        "0",
        "--debounce-seconds",
        "0.05",
    )


def _version(base: dict[str, bytes], k: int) -> dict[str, bytes]:
    # two files that must always agree: slurm.conf and the file it includes
    files = dict(base)
    files["slurm.conf"] = base["slurm.conf"] + f"Include extra.conf\n# set {k}\n".encode()
    files["extra.conf"] = f"# set {k}\n".encode()
    return files


def _sets_on_disk(target: Path) -> set[int]:
    found = set()
    for name in ("slurm.conf", "extra.conf"):
        m = MARK.search((target / name).read_bytes()) if (target / name).exists() else None
        found.add(int(m[1]) if m else -1)
    return found


@pytest.mark.timeout(180)
@pytest.mark.releases("slurm24")  # the swap is ours, not Slurm's: one release shows it
async def test_sigkill_at_any_moment_leaves_a_whole_set(cluster: DevCluster) -> None:
    target = cluster.conf_path.parent
    base = cluster_files(cluster)
    vol = AtomicVolume(cluster.dir / "vol" / "cm")
    vol.write(_version(base, 0))
    rng = random.Random(20261130)
    for k in range(1, 9):
        proc = (await start_command(cluster, vol, *_args(cluster))).proc
        assert _sets_on_disk(target) == {k - 1}  # the start-up sync applied the volume's set
        vol.write(_version(base, k))
        await asyncio.sleep(rng.uniform(0.02, 0.35))
        proc.send_signal(signal.SIGKILL)
        await proc.communicate()
        on_disk = _sets_on_disk(target)
        assert len(on_disk) == 1, f"half a set in {target}: {on_disk}"
        assert on_disk <= {k - 1, k}
        assert (await cluster.client().ping()).up
    cmd = await start_command(cluster, vol, *_args(cluster))
    try:
        assert _sets_on_disk(target) == {8}
        status = await cmd.get("/status")
        assert status["rejected"] is None and status["pending"] is False
    finally:
        cmd.proc.send_signal(signal.SIGTERM)
        await within(cmd.proc.communicate(), 10)
    assert cmd.proc.returncode == 0
