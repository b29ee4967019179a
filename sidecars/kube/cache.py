"""One list-then-watch loop for every kind of object the sidecars keep current (pods, Nodes,
ComputeDomains): list, then watch from the list's resourceVersion, and list again after a 410
(the version compacted away) or any failure, with a doubling pause. A BOOKMARK only moves the
version to resume from, so a quiet set reopened after compaction is not listed again. Whoever
reads `items` sees the latest state the API server sent; `synced` is set once the first list
has arrived.

A watch that hears nothing, not even a bookmark, within the client's silence bound is given up
(the client's read deadline) and the set listed again. Meanwhile, and for as long as that list
fails, `stale` says so (readiness and a metric read it): a cache that looks current but froze
would let busy labels, and with them the PodDisruptionBudget's protection, lapse unnoticed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Generic, TypeVar

import structlog

from sidecars.kube.errors import KubeError, WatchSilent

log = structlog.get_logger(__name__)

T = TypeVar("T")
Lister = Callable[[], Awaitable[tuple[list[T], str]]]
Watcher = Callable[[str], AsyncIterator[tuple[str, T]]]


@dataclass(eq=False)
class WatchCache(Generic[T]):
    lister: Lister[T]
    watcher: Watcher[T]
    key: Callable[[T], str]
    version: Callable[[T], str]
    _: KW_ONLY
    failed_event: str  # the log event naming what failed, e.g. pod_watch_failed
    silence_seconds: float = 90.0  # the client's bound: nothing heard for longer is stale
    items: dict[str, T] = field(default_factory=dict, init=False)
    synced: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    heard_at: float | None = field(default=None, init=False)  # monotonic: the last list, event or bookmark
    relists: int = field(default=0, init=False)  # lists after the first (a 410, a failure, a silent watch)

    @property
    def stale(self) -> bool:
        """Nothing heard from the API server within the bound (or never listed)."""
        return self.heard_at is None or time.monotonic() - self.heard_at > self.silence_seconds

    def staleness(self) -> tuple[bool, str]:
        """(current, what to say), for a readiness check."""
        if self.heard_at is None:
            return False, "not listed yet"
        age = time.monotonic() - self.heard_at
        return not self.stale, f"last heard {age:.1f}s ago (bound {self.silence_seconds:g}s)"

    async def run(self) -> None:
        """List, then watch from the list's version; list again after a 410 or any failure."""
        delay = 0.5
        while True:
            pause = delay
            try:
                items, rv = await self.lister()
                if self.synced.is_set():
                    self.relists += 1
                self.items = {self.key(i): i for i in items}
                self.heard_at = time.monotonic()
                self.synced.set()
                delay = 0.5
                while True:
                    async for kind, item in self.watcher(rv):
                        self.heard_at = time.monotonic()
                        rv = self.version(item) or rv
                        if kind == "BOOKMARK":  # only the version to resume from
                            continue
                        if kind == "DELETED":
                            self.items.pop(self.key(item), None)
                        else:
                            self.items[self.key(item)] = item
            except WatchSilent as exc:
                log.warning(self.failed_event, reason=exc.reason, relist=True)
                pause = 0.0  # a dead connection, not an overloaded server: list again at once
            except KubeError as exc:
                if exc.status != 410:
                    log.warning(self.failed_event, status=exc.status, reason=exc.reason)
            except Exception as exc:  # connection reset, malformed stream: list again after a pause
                log.warning(self.failed_event, error=str(exc))
            await asyncio.sleep(pause)
            delay = min(delay * 2, 30.0)
