"""What the upgrade tests read from accounting: a job's finished record, once slurmdbd has it."""

from __future__ import annotations

import asyncio
import time

from sidecars.devcluster import DevCluster


async def finished_record(c: DevCluster, job: int, timeout: float = 60.0) -> tuple[str, str]:
    """The job's (state, exit code) in `sacct` once it ended there (records arrive asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        record = (await c.sacct(job)).get(job)
        if record and record[0] not in ("PENDING", "RUNNING"):
            return record
        assert time.monotonic() < deadline, f"no finished record of job {job} in sacct: {record}"
        await asyncio.sleep(0.2)
