"""Run `slurm-sidecars status` as a person would: a separate process, its exit code and output."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass

from sidecars.cli import self_argv
from sidecars.runtime.waits import within


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


async def status(*args: str, env: Mapping[str, str] | None = None, limit: float = 60) -> Result:
    proc = await asyncio.create_subprocess_exec(
        *self_argv("status", *args),
        env=dict(os.environ if env is None else env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await within(proc.communicate(), limit)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())
