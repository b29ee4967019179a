"""Waiting, in the demo, for what a real daemon or job will do: polled, bounded, named when late."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


class TimedOut(RuntimeError):
    pass


async def until(what: str, check: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
    """`check()`'s first truthy value; TimedOut naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimedOut(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.05)
