"""A root task that ends while its daemon runs is logged with its traceback, fails liveness naming
it, and stops the daemon with exit 1; one that ends because the daemon stops is no failure."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from sidecars.runtime import daemon
from sidecars.runtime.tasks import RootTaskFailed, RootTasks, until_stopped
from sidecars.runtime.waits import within


async def _forever() -> None:
    await asyncio.Event().wait()


async def _fails(after: asyncio.Event) -> None:
    await after.wait()
    raise RuntimeError("injected: the loop broke")


async def test_a_task_that_raises_is_logged_with_its_traceback_and_fails_liveness() -> None:
    tasks, go = RootTasks(), asyncio.Event()
    tasks.start("refresh_loop", _forever())
    tasks.start("drain_loop", _fails(go))
    assert tasks.check().ok and "refresh_loop, drain_loop" in tasks.check().detail
    with structlog.testing.capture_logs() as logs:
        go.set()
        with pytest.raises(RootTaskFailed, match=r"drain_loop: RuntimeError: injected"):
            await within(until_stopped(asyncio.Event(), tasks), 10)
    check = tasks.check()
    assert not check.ok and check.detail == "drain_loop ended: RuntimeError: injected: the loop broke"
    (line,) = [e for e in logs if e["event"] == "root_task_failed"]
    assert line["task"] == "drain_loop" and line["log_level"] == "error"
    assert isinstance(line["exc_info"], RuntimeError)  # rendered as its traceback
    await tasks.stop()


async def test_a_task_that_returns_is_a_failure_too() -> None:
    tasks = RootTasks()

    async def returns() -> None:
        await asyncio.sleep(0)

    tasks.start("watch", returns())
    with pytest.raises(RootTaskFailed, match="watch: returned"):
        await within(until_stopped(asyncio.Event(), tasks), 10)
    await tasks.stop()


async def test_tasks_that_end_because_the_daemon_stops_are_no_failure() -> None:
    """The roles' pattern: the daemon's stop ends the wait, and only then are the tasks told."""
    tasks, signalled, inner = RootTasks(), asyncio.Event(), asyncio.Event()
    tasks.start("leader", inner.wait())  # hands its Lease back and returns once told to stop
    tasks.start("loop", _forever())
    signalled.set()
    await until_stopped(signalled, tasks)  # returns: nothing failed
    tasks.stopping()
    inner.set()
    await tasks.stop(grace=5.0, first=("leader",))
    assert tasks.check().ok and not tasks.failures


async def test_names_are_unique() -> None:
    tasks = RootTasks()
    tasks.start("loop", _forever())
    with pytest.raises(ValueError, match="loop"):
        tasks.start("loop", _forever())
    await tasks.stop()


def test_the_daemon_exits_1_with_the_failed_task_in_its_log(capsys: pytest.CaptureFixture[str]) -> None:
    async def main(stop: asyncio.Event) -> None:
        tasks, go = RootTasks(), asyncio.Event()
        tasks.start("drain_loop", _fails(go))
        go.set()
        try:
            await until_stopped(stop, tasks)
        finally:
            await tasks.stop()

    assert daemon.run(main) == daemon.EXIT_FAILURE
    err = capsys.readouterr().err
    assert "root_task_failed" in err and "drain_loop" in err
    assert "Traceback" in err and "RuntimeError: injected: the loop broke" in err
    assert "daemon_failed" in err


async def test_a_cancel_landing_while_until_stopped_cleans_up_is_kept() -> None:
    outcomes = set()
    for steps in range(8):  # lands before, during and after its clean-up
        stop = asyncio.Event()
        stop.set()
        task = asyncio.ensure_future(until_stopped(stop, RootTasks()))
        for _ in range(steps):
            await asyncio.sleep(0)
        if task.cancel():
            with pytest.raises(asyncio.CancelledError):
                await task
            outcomes.add("cancelled")
        else:
            await task
            outcomes.add("returned")
    assert outcomes == {"cancelled", "returned"}  # the sweep covered both sides
