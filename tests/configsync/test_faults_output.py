"""Under faults (slurmctld killed or restarted in the middle of a verification) config-sync's own
output holds no "Task exception was never retrieved": every task it starts has its end collected,
an error included. Read from the real `slurm-sidecars config-sync` process's stderr."""

from __future__ import annotations

import asyncio
import random
import signal
from typing import Any

import pytest

from sidecars.devcluster import DevCluster
from sidecars.devcluster.volume import AtomicVolume
from sidecars.runtime.waits import within
from tests.configsync.harness import Command, cluster_files, container_start, set_sha, start_command

pytestmark = pytest.mark.cluster(nodes=2, foreground_ctld=True)


async def status_until(cmd: Command, ok: Any, what: str, seconds: float) -> dict[str, Any]:
    async def poll() -> dict[str, Any]:
        while True:
            st: dict[str, Any] = await cmd.get("/status")
            if ok(st):
                return st
            await asyncio.sleep(0.02)

    try:
        return await within(poll(), seconds)
    except TimeoutError:
        last = await cmd.get("/status")
        raise AssertionError(f"config-sync never reached: {what}; status {last}") from None


@pytest.mark.timeout(400)
@pytest.mark.releases("slurm24")  # the tasks are ours; per-release deaths are in test_foreground.py
async def test_no_task_exception_is_left_unretrieved_when_slurmctld_dies_mid_verification(
    cluster: DevCluster,
) -> None:
    vol = AtomicVolume(cluster.dir / "vol" / "cm")
    base = cluster_files(cluster)
    vol.write(base)
    target = str(cluster.conf_path.parent)
    cmd = await start_command(
        cluster,
        vol,
        "--settle-seconds",
        "1.5",
        "--dry-run",
        "off",
        env={"SIDECARS_STATE_DIR": str(cluster.dir / "cs-state")},
    )
    rng = random.Random(20261201)
    try:
        for i in range(10):  # the instants that hit a reset connection vary: enough of them
            conf = base["slurm.conf"].replace(b"MaxTime=INFINITE", f"MaxTime={60 + i}".encode())
            files = {**base, "slurm.conf": conf}
            sha = set_sha(files)
            vol.write(files)
            await status_until(cmd, lambda st: st["pending"], "a change being applied", 30)
            await asyncio.sleep(rng.uniform(0.0, 1.5))  # an instant within the reconfigure and settle
            await cluster.stop_slurmctld(crash=i % 2 == 0)  # killed, or shut down as a restart does
            await container_start(cluster, target)

            def judged(st: dict[str, Any], sha: str = sha) -> bool:
                done = [st[k] for k in ("applied", "rejected") if st[k] and st[k]["sha256"] == sha]
                return bool(done) and not st["pending"]

            await status_until(cmd, judged, f"change {i} applied or refused", 60)
    finally:
        cmd.proc.send_signal(signal.SIGTERM)
        _, err = await within(cmd.proc.communicate(), 30)
    text = err.decode(errors="replace")
    assert cmd.proc.returncode == 0, text[-3000:]
    assert "never retrieved" not in text, text[text.find("never retrieved") - 2000 :][:4000]
