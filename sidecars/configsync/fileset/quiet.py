"""Waiting for the sources to go quiet before a pass reads them: one edit applies at once, a storm of
them becomes few reconfigures.

The quiet time protects a set written file by file (a compose bind mount, an edit by hand): read in
the middle, it would be half a change. A kubelet volume never shows half of one: each update is one
rename of its `..data` link, so when every source is such a volume a lone change is read at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sidecars.configsync.fileset.sources import DATA_LINK

# a burst's quiet time stops growing here: a storm then waits at most this long after its last change.
# Kept under the spacing of changes made by hand (1 s apart must not wait for each other); a storm is
# batched anyway, since every pass reads the newest set
BURST_QUIET_SECONDS = 0.3


class Debouncer:
    """A lone change waits `lone_seconds`; each further change of a burst doubles the quiet time (up to
    BURST_QUIET_SECONDS), and a storm that never goes quiet is passed on after `max_seconds`. A lone
    change waits for nothing when `whole()` says the sources can only change as whole sets."""

    def __init__(
        self,
        wake: asyncio.Event,
        *,
        lone_seconds: float,
        max_seconds: float,
        whole: Callable[[], bool] = lambda: False,
    ) -> None:
        self.wake = wake
        self.lone_seconds = lone_seconds
        self.max_seconds = max_seconds
        self.whole = whole
        self.in_burst = False  # a change arrived while the last set was applied
        self._quiet = lone_seconds  # the quiet time, grown by a burst

    async def wait(self, stop: asyncio.Event) -> None:
        """Until the sources stay quiet (the wake event not set again), at most max_seconds."""
        if not self.in_burst and self.whole():
            # the set on disk is a whole one already; a storm of swaps still waits (in_burst) so
            # that it becomes few reconfigures
            self.wake.clear()
            self._quiet = self.lone_seconds
            return
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


def swapped_whole(sources: Sequence[Path]) -> bool:
    """True when every source is a kubelet volume (its `..data` is a symlink), so each of its updates
    is one atomic swap. Several volumes are swapped one after the other: a pass between two swaps
    judges the first alone, and the second is a change of its own, as a later edit would be."""
    return bool(sources) and all(os.path.islink(s / DATA_LINK) for s in sources)


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
