"""File events as hints: any change under a source directory wakes the sync loop, which hashes and decides."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog
from watchfiles import awatch

from sidecars.runtime.waits import until_set

log = structlog.get_logger(__name__)


async def watch(
    paths: Sequence[Path], wake: Callable[[], None], stop: asyncio.Event, ready: asyncio.Event | None = None
) -> None:
    """Call `wake()` on every batch of events until `stop`; a failing watcher is restarted (the periodic
    re-hash covers the gap, so a lost event is never a lost change). `ready` is set once the watches
    are in place: a change after that cannot go unseen."""
    while not stop.is_set():
        # awatch sets the event it is given when it is cancelled (to end its thread): it gets one of
        # its own, relayed from `stop`, so a cancelled watch never reads as the daemon stopping
        halt = asyncio.Event()
        relay = asyncio.ensure_future(_relay(stop, halt))
        relay.set_name("watch_stop_relay")
        try:
            # no filter: the kubelet's `..data_tmp` rename is exactly the event that matters; the
            # empty yields on timeout tell that the watcher runs (watchfiles has no other signal)
            async for changes in awatch(
                *paths,
                watch_filter=None,
                debounce=50,
                step=10,
                stop_event=halt,
                recursive=True,
                ignore_permission_denied=True,
                rust_timeout=300,
                yield_on_timeout=True,
            ):
                if ready is not None:
                    ready.set()
                if changes:
                    log.debug("sources_changed", count=len(changes))
                    wake()
        except Exception as exc:
            log.warning("watch_failed", error=str(exc))
            wake()
            await until_set(stop, 1.0)
        finally:
            relay.cancel()
            await asyncio.gather(relay, return_exceptions=True)


async def _relay(stop: asyncio.Event, halt: asyncio.Event) -> None:
    await stop.wait()
    halt.set()
