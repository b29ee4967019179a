"""One list-then-watch loop for every kind of object the sidecars keep current (pods, Nodes,
ComputeDomains): list, then watch from the list's resourceVersion, and list again after a 410
(the version compacted away) or any failure, with a doubling pause. A BOOKMARK only moves the
version to resume from, so a quiet set reopened after compaction is not listed again. Whoever
reads `items` sees the latest state the API server sent; `synced` is set once the first list
has arrived."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, TypeVar

import structlog

from sidecars.kube.client import KubeError

log = structlog.get_logger(__name__)

T = TypeVar("T")
Lister = Callable[[], Awaitable[tuple[list[T], str]]]
Watcher = Callable[[str], AsyncIterator[tuple[str, T]]]


class WatchCache(Generic[T]):
    def __init__(
        self,
        lister: Lister[T],
        watcher: Watcher[T],
        key: Callable[[T], str],
        version: Callable[[T], str],
        *,
        failed_event: str,
    ) -> None:
        self._list = lister
        self._watch = watcher
        self._key = key
        self._version = version
        self._failed_event = failed_event  # the log event naming what failed, e.g. pod_watch_failed
        self.items: dict[str, T] = {}
        self.synced = asyncio.Event()

    async def run(self) -> None:
        """List, then watch from the list's version; list again after a 410 or any failure."""
        delay = 0.5
        while True:
            try:
                items, rv = await self._list()
                self.items = {self._key(i): i for i in items}
                self.synced.set()
                delay = 0.5
                while True:
                    async for kind, item in self._watch(rv):
                        rv = self._version(item) or rv
                        if kind == "BOOKMARK":  # only the version to resume from
                            continue
                        if kind == "DELETED":
                            self.items.pop(self._key(item), None)
                        else:
                            self.items[self._key(item)] = item
            except KubeError as exc:
                if exc.status != 410:
                    log.warning(self._failed_event, status=exc.status, reason=exc.reason)
            except Exception as exc:  # connection reset, malformed stream: list again after a pause
                log.warning(self._failed_event, error=str(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
