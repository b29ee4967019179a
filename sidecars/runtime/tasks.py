"""A daemon's root tasks: each one named and guarded.

A root task runs for the whole life of its daemon (a refresh loop, a drain loop, a watch). One that
ends while the daemon still runs, by an exception or by returning, is a daemon that stopped doing
part of its job while everything else looks fine. So its end is logged at once with its traceback,
liveness fails naming it, and `until_stopped` raises: the daemon winds down (handing its Lease back,
closing its sockets) and exits 1, for Kubernetes (or any supervisor) to restart it at once rather
than after a liveness probe's failure threshold, and even where no probe is wired.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

from sidecars.runtime.checks import CheckResult

log = structlog.get_logger("sidecars.tasks")


class RootTaskFailed(RuntimeError):
    """A root task ended while its daemon still ran; the message names it and says how."""


class RootTasks:
    """`start(name, coro)` each root task; `check()` is a liveness check; `stop()` ends them all."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self.failures: dict[str, str] = {}  # task name -> how it ended
        self.failed = asyncio.Event()
        self._stopping = False

    def start(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        if name in self._tasks:
            coro.close()
            raise ValueError(f"a root task named {name!r} runs already")
        task = asyncio.create_task(coro, name=name)
        self._tasks[name] = task
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        if self._stopping:
            return
        name = task.get_name()
        if task.cancelled():
            how = "cancelled"
            log.error("root_task_ended", task=name, how=how)
        elif (exc := task.exception()) is not None:
            how = f"{type(exc).__name__}: {exc}"
            log.error("root_task_failed", task=name, error=how, exc_info=exc)
        else:
            how = "returned"
            log.error("root_task_ended", task=name, how=how)
        self.failures[name] = how
        self.failed.set()

    @property
    def names(self) -> list[str]:
        return list(self._tasks)

    def check(self) -> CheckResult:
        """Liveness: every root task still runs."""
        if self.failures:
            return CheckResult(False, "; ".join(f"{n} ended: {how}" for n, how in self.failures.items()))
        return CheckResult(True, f"running: {', '.join(self._tasks) or 'none yet'}")

    def raise_if_failed(self) -> None:
        if self.failures:
            raise RootTaskFailed(
                "root task ended: " + "; ".join(f"{n}: {how}" for n, how in self.failures.items())
            )

    def stopping(self) -> None:
        """From now on a task that ends is the daemon stopping, not a failure."""
        self._stopping = True

    async def stop(
        self, *, grace: float | None = 0.0, first: tuple[str, ...] = (), keep: tuple[str, ...] = ()
    ) -> None:
        """Let the tasks named in `first` end by themselves within `grace` seconds (None: however
        long they take; the leader elector hands its Lease back), then cancel every task until done,
        except those named in `keep` (stopped by a later call: the Lease after its writers)."""
        self.stopping()
        waiting = [self._tasks[n] for n in first if n in self._tasks and not self._tasks[n].done()]
        if waiting and (grace is None or grace > 0):
            await asyncio.wait(waiting, timeout=grace)
        # cancel until done: on Python 3.11 a wait_for whose inner await completes at the moment
        # of the cancel swallows it (cpython#86296), and a loop would then run on forever
        pending = {t for n, t in self._tasks.items() if not t.done() and n not in keep}
        while pending:
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=0.5)
        for name, task in self._tasks.items():
            if name not in keep and not task.cancelled() and task.exception() is not None:
                log.warning(
                    "root_task_failed_while_stopping", task=task.get_name(), error=str(task.exception())
                )


async def until_stopped(stop: asyncio.Event, tasks: RootTasks) -> None:
    """Wait for `stop`; raise `RootTaskFailed` as soon as a root task ends on its own."""
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(tasks.failed.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        # their cancellations come back as results; a cancellation of this task still raises
        await asyncio.gather(*waits, return_exceptions=True)
    tasks.raise_if_failed()
