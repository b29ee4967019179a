"""Running a role as a daemon: SIGTERM/SIGINT/SIGHUP stop it gracefully (exit 0), a bad config is
exit 2, a failure at run time exit 1."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator

import structlog

from sidecars.runtime.settings import ConfigError
from sidecars.runtime.tasks import RootTaskFailed
from sidecars.runtime.waits import within

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG = 0, 1, 2
# SIGHUP too: a terminal that vanishes (or a supervisor's hang-up) must stop us cleanly, not kill us
# and leave whatever we started behind
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


async def run_until_signalled(
    main: Callable[[asyncio.Event], Awaitable[None]], grace_seconds: float = 1.5
) -> int:
    """Run `main(stop)`; on a stop signal set `stop`, give main `grace_seconds` to return, then cancel it."""
    log = structlog.get_logger("sidecars.daemon")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signalled: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        signalled.append(sig.name)
        stop.set()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    task = asyncio.ensure_future(main(stop))
    stop_wait = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        if task not in done:
            log.info("stopping", signal=signalled[-1] if signalled else None)
            try:
                await within(asyncio.shield(task), grace_seconds)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        stop_wait.cancel()
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        return EXIT_OK
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        # cancelled itself (a caller's own stop): main and the wait end with it, never left running
        for left in (task, stop_wait):
            left.cancel()
        await asyncio.gather(task, stop_wait, return_exceptions=True)


@contextlib.contextmanager
def children_watched_without_threads() -> Iterator[None]:
    """Python 3.11 starts a thread to wait for each child (its default child watcher), and the loop
    waits until that thread runs: 0.1-0.3 s held on a loaded machine at every Slurm command we
    run. A pidfd watches a child from the loop itself (3.12 picks it on its own). Kept as it was
    where pidfds are refused (an old kernel, a seccomp profile that denies pidfd_open)."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        yield
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        yield
        return
    previous = asyncio.get_child_watcher()
    asyncio.set_child_watcher(asyncio.PidfdChildWatcher())
    try:
        yield
    finally:
        asyncio.set_child_watcher(previous)


def run(main: Callable[[asyncio.Event], Awaitable[None]], grace_seconds: float = 1.5) -> int:
    """The process entry for a daemon role: returns the exit code."""
    log = structlog.get_logger("sidecars.daemon")
    try:
        with children_watched_without_threads():
            return asyncio.run(run_until_signalled(main, grace_seconds))
    except ConfigError as exc:
        print(f"slurm-sidecars: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return EXIT_OK
    except RootTaskFailed as exc:  # its traceback was logged when it ended
        log.error("daemon_failed", error=str(exc))
        return EXIT_FAILURE
    except Exception as exc:
        log.error("daemon_failed", error=str(exc), exc_info=True)
        return EXIT_FAILURE
