"""CPU-bound work over a size off the event loop: in a thread (the interpreter hands the loop a
turn every few milliseconds however long the work runs), and on the loop below it (a thread's
start costs more than a small set's checks)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from sidecars.runtime import limits

P = ParamSpec("P")
T = TypeVar("T")


async def sized(size: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)`, in a thread when `size` (the characters or bytes it reads) reaches
    `limits.OFF_LOOP_CHARS`."""
    if size >= limits.OFF_LOOP_CHARS:
        return await asyncio.to_thread(fn, *args, **kwargs)
    return fn(*args, **kwargs)


async def whole(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` in a thread, and on cancellation still waited for before the caller goes
    on (a thread cannot be stopped: one still writing a file after its caller moved on would race
    the next write of it). Cancellation is raised once it ended."""
    work = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        while not work.done():  # not cancellable: it ends on its own (a parse, a few file writes)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.shield(work)
        raise
