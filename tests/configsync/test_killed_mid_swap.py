"""The real config-sync process, SIGKILLed at random moments while it applies a change: whatever
the moment, the directory slurmctld reads holds one whole set (the old or the new), and the next
start brings it to the volume's set."""

from __future__ import annotations

import asyncio
import random
import re
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from sidecars.devcluster import DevCluster
from sidecars.devcluster.volume import AtomicVolume
from tests.configsync.harness import cluster_files

MARK = re.compile(rb"# set (\d+)")


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


async def _start(cluster: DevCluster, vol: AtomicVolume) -> tuple[asyncio.subprocess.Process, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sidecars",
        "--log-format",
        "json",
        "config-sync",
        "--source",
        str(vol.path),
        "--target",
        str(cluster.conf_path.parent),
        "--state-dir",
        str(cluster.dir / "cs-state"),
        "--http",
        f"127.0.0.1:{port}",
        "--settle-seconds",
        "0",
        "--debounce-seconds",
        "0.05",
        env=cluster.env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    async with aiohttp.ClientSession() as s:
        for _ in range(300):
            try:
                async with s.get(f"http://127.0.0.1:{port}/readyz") as r:
                    if r.status == 200:
                        return proc, port
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    proc.kill()
    await proc.wait()
    raise AssertionError("config-sync never became ready")


@pytest.mark.timeout(180)
async def test_sigkill_at_any_moment_leaves_a_whole_set(cluster: DevCluster) -> None:
    target = cluster.conf_path.parent
    base = cluster_files(cluster)
    vol = AtomicVolume(cluster.dir / "vol" / "cm")
    vol.write(_version(base, 0))
    rng = random.Random(20261130)
    for k in range(1, 9):
        proc, _ = await _start(cluster, vol)
        assert _sets_on_disk(target) == {k - 1}  # the start-up sync applied the volume's set
        vol.write(_version(base, k))
        # a debounce of 0.05 s, then validation, staging, the swap and the reconfigure: the kill
        # lands anywhere among them
        await asyncio.sleep(rng.uniform(0.02, 0.35))
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        on_disk = _sets_on_disk(target)
        assert len(on_disk) == 1, f"half a set in {target}: {on_disk}"
        assert on_disk <= {k - 1, k}
        assert (await cluster.client().ping()).up
    proc, port = await _start(cluster, vol)
    try:
        assert _sets_on_disk(target) == {8}
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/status") as r:
            status = await r.json()
        assert status["rejected"] is None and status["pending"] is False
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
