"""Watching an HA dev cluster beside a test: who is in control (each stretch with none), and how
long a client waited for an answer. One loop for both (`watching`), each watcher its own record."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from sidecars.devcluster import DevCluster
from sidecars.runtime.waits import until_set
from sidecars.slurm import SlurmClient, SlurmError


@contextlib.asynccontextmanager
async def watching(look: Callable[[], Awaitable[None]], every: float, name: str) -> AsyncIterator[None]:
    """`look` again and again, `every` seconds apart, beside the block; the last look ends with it."""
    stop = asyncio.Event()

    async def loop() -> None:
        while not stop.is_set():
            await look()
            await until_set(stop, every)

    task = asyncio.create_task(loop(), name=name)
    try:
        yield
    finally:
        stop.set()
        await task


@dataclass
class Gaps:
    """Each stretch of time no controller was in control (asked alone, as `DevCluster.primary` does)."""

    gaps: list[float] = field(default_factory=list)
    since: float | None = None
    in_control: str | None = None

    def each(self) -> list[float]:
        """Every stretch so far, one still open included."""
        return [*self.gaps, *([time.monotonic() - self.since] if self.since is not None else [])]

    def longest(self) -> float:
        return max(self.each(), default=0.0)


@contextlib.asynccontextmanager
async def watching_control(cluster: DevCluster) -> AsyncIterator[Gaps]:
    gaps = Gaps()

    async def look() -> None:
        who = await cluster.primary()
        now = time.monotonic()
        if who is None and gaps.since is None:
            gaps.since = now
        elif who is not None and gaps.since is not None:
            gaps.gaps.append(now - gaps.since)
            gaps.since = None
        gaps.in_control = who

    async with watching(look, 0.1, "test-watch-control"):
        yield gaps


@dataclass
class Freeze:
    """The longest time a client of the cluster waited for an answer (`scontrol show config`)."""

    longest: float = 0.0


@contextlib.asynccontextmanager
async def watching_answers(cluster: DevCluster) -> AsyncIterator[Freeze]:
    freeze = Freeze()
    client = SlurmClient(env=cluster.env)

    async def look() -> None:
        asked = time.monotonic()
        with contextlib.suppress(SlurmError):
            await client.show_config()
        freeze.longest = max(freeze.longest, time.monotonic() - asked)

    async with watching(look, 0.2, "test-watch-answers"):
        yield freeze
