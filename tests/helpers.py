"""Test machinery every concern uses: polling until a condition holds, and an event sink that records."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sidecars.runtime.events import EventType

T = TypeVar("T")


async def eventually(
    read: Callable[[], T | Awaitable[T]],
    ok: Callable[[T], Any] = bool,
    *,
    within: float = 30.0,
    what: str = "condition",
    every: float = 0.05,
) -> T:
    """Call `read` (plain or async) until `ok(value)` holds and return that value; fail after
    `within` seconds naming `what` and the last value. Generous defaults: the machine is shared."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = read()
        if inspect.isawaitable(value):
            value = await value
        if ok(value):  # type: ignore[arg-type]
            return value  # type: ignore[return-value]
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within:g}s waiting for {what}; last: {value!r}")
        await asyncio.sleep(every)


class RecordingEvents:
    """An EventSink that keeps what it was told, for assertions (the Kubernetes one is tested in kube/)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    async def emit(self, reason: str, message: str, type: EventType = "Normal") -> None:
        self.events.append((reason, message, type))

    def reasons(self) -> list[str]:
        return [r for r, _, _ in self.events]
