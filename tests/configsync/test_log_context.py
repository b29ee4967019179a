"""Every line about a change set names it (its hash and files), bound once for that unit of work,
whichever step logs it."""

from __future__ import annotations

import pytest
import structlog

from sidecars.devcluster import DevCluster
from tests.configsync.harness import config_sync, set_sha


@pytest.mark.releases("slurm26")  # the log lines are ours, not Slurm's: one release shows it
async def test_a_rejected_change_logs_its_hash_and_files(cluster: DevCluster) -> None:
    async with config_sync(cluster) as sync:
        files = sync.good()
        files["slurm.conf"] = files["slurm.conf"] + b"ThisIsNotAKey=1\n"
        sha = set_sha(files)
        with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
            sync.config.write(files)
            await sync.wait(sha, key="rejected")
        (line,) = [e for e in logs if e["event"] == "config_not_applied"]
        assert sha.startswith(line["sha256"]) and line["result"] == "rejected"
        assert "slurm.conf" in line["files"]
