"""CPU-bound work over a size off the event loop: in a thread (the interpreter hands the loop a
turn every few milliseconds however long the work runs), and on the loop below it (a thread's
start costs more than a small set's checks).

A thread still shares the loop's interpreter lock, and three things let one hold the loop for
longer than that turn (issue 33: a MiB of `K= K= ...` lagged config-sync's loop 115-161 ms with no
CPU on the loop's thread). Measured with the loop's lag probe beside two threads parsing that set:
- two CPU-bound threads at once: the lock is handed to either waiter, not to the loop first, so
  the loop can wait out several turns in a row (120-260 ms);
- the cyclic collector: 350,000 tuples made by one parse set off full collections, each one long
  C call walking the whole heap with the lock held (16-40 ms each);
- one C call over the whole MiB (a regex split: 37-83 ms), which no turn interrupts.
So sized work runs in one lane per process (one at a time, as there is one interpreter lock),
with automatic collection paused (runtime.gcpause: what the work builds is freed by reference
counting when it is done; the loop's own cycles wait as long, a parse's second at most), and the
parsers cut long lines before a C call reads them (runtime.textcuts). Together: 37-55 ms at load
11, from 119-262 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from sidecars.runtime import gcpause, limits

P = ParamSpec("P")
T = TypeVar("T")

# One lane per process, as there is one interpreter lock per process: a lock, not state (a work
# waiting for it waits in its own thread, the lock released).
_LANE = threading.Lock()


def in_lane(fn: Callable[[], T]) -> T:
    """`fn()` in this thread, once no other sized work runs, without automatic collection."""
    with _LANE, gcpause.paused():
        return fn()


async def sized(size: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)`, in a thread when `size` (the characters or bytes it reads) reaches
    `limits.OFF_LOOP_CHARS`: in the lane (one such work at a time), the collector paused."""
    if size >= limits.OFF_LOOP_CHARS:
        return await asyncio.to_thread(in_lane, functools.partial(fn, *args, **kwargs))
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
