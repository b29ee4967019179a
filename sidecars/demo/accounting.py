"""The tour's accounting step (`demo --tour --accounting`): the tour's jobs as slurmdbd recorded them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from sidecars.demo.stack import DemoStack


class NotRecorded(RuntimeError):
    pass


async def step_sacct(stack: DemoStack, timeout: float = 30.0) -> str:
    c = stack.cluster
    # held back an hour, then cancelled: a record slurmdbd gets whatever nodes are free now
    job = await c.sbatch("-t", "1", "--begin=now+3600", wrap="true")
    await c.scancel(job)
    deadline = time.monotonic() + timeout
    # named, as a job never eligible is outside any time window sacct lists by default
    while (mine := await c.sacct(job)).get(job, ("PENDING", ""))[0] != "CANCELLED":
        if time.monotonic() > deadline:
            raise NotRecorded(f"job {job}'s cancel did not reach sacct within {timeout:g}s: {mine}")
        await asyncio.sleep(0.2)  # slurmdbd receives job events asynchronously
    records = {**await c.sacct(), **mine}
    for jid, (state, code) in sorted(records.items()):
        print(f"  sacct: job {jid} {state} (exit {code})", flush=True)
    return f"{len(records)} jobs in sacct, job {job}'s cancel among them"


STEPS: list[tuple[str, Callable[[DemoStack], Awaitable[str]]]] = [
    ("Jobs in accounting (slurmdbd on MariaDB)", step_sacct),
]
