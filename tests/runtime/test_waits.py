"""A wait with a deadline keeps the caller's cancellation, whenever it lands."""

from __future__ import annotations

import asyncio

import pytest

from sidecars.runtime.waits import until_set, within


async def test_a_cancel_landing_as_the_event_is_set_is_kept() -> None:
    # the inner wait finishes first, then the cancel arrives: 3.11's wait_for returned True here
    event = asyncio.Event()
    task = asyncio.ensure_future(until_set(event, 10))
    await asyncio.sleep(0)
    event.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancel_landing_as_the_awaited_ends_is_kept() -> None:
    done = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(within(done, 10))
    await asyncio.sleep(0)
    done.set_result("late")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_deadlines_and_results() -> None:
    event = asyncio.Event()
    assert await until_set(event, 0.01) is False
    event.set()
    assert await until_set(event, 0) is True  # already set: no wait at all
    assert await within(asyncio.sleep(0, "v"), None) == "v"
    with pytest.raises(TimeoutError):
        await within(asyncio.sleep(10), 0.01)
