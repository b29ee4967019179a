"""Waiting for the sources to go quiet before a pass reads them: one edit applies at once, a storm of
them becomes few reconfigures."""

from __future__ import annotations

import asyncio
import time
from typing import Any

# a burst's quiet time stops growing here: a storm then waits at most this long after its last change.
# Kept under the spacing of changes made by hand (1 s apart must not wait for each other); a storm is
# batched anyway, since every pass reads the newest set
BURST_QUIET_SECONDS = 0.3


class Debouncer:
    """A lone change waits `lone_seconds`; each further change of a burst doubles the quiet time (up to
    BURST_QUIET_SECONDS), and a storm that never goes quiet is passed on after `max_seconds`."""

    def __init__(self, wake: asyncio.Event, *, lone_seconds: float, max_seconds: float) -> None:
        self.wake = wake
        self.lone_seconds = lone_seconds
        self.max_seconds = max_seconds
        self.in_burst = False  # a change arrived while the last set was applied
        self._quiet = lone_seconds  # the quiet time, grown by a burst

    async def wait(self, stop: asyncio.Event) -> None:
        """Until the sources stay quiet (the wake event not set again), at most max_seconds."""
        ceiling = max(BURST_QUIET_SECONDS, self.lone_seconds)
        quiet = min(self._quiet * 2, ceiling) if self.in_burst else self.lone_seconds
        first = time.monotonic()
        try:
            while True:
                self.wake.clear()
                left = self.max_seconds - (time.monotonic() - first)
                if left <= 0 or stop.is_set():
                    return
                if not await first_of(self.wake.wait(), stop.wait(), within=min(quiet, left)):
                    return
                quiet = min(max(quiet * 2, 0.05), ceiling)
        finally:
            self._quiet = quiet


async def first_of(*aws: Any, within: float) -> bool:
    """Wait for the first of `aws` (at most `within` s); True if one finished."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        done, _ = await asyncio.wait(tasks, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        return bool(done)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
