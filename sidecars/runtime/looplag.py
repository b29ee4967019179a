"""How late the event loop runs: a small root task asks to wake every `interval` and measures how
much later it woke. A step that holds the loop (CPU-bound work on it, a blocking call) shows as lag,
in a metric and in liveness: `/livez` fails naming this check when the loop lagged past the bound
lately, so the kubelet restarts a sidecar that no longer answers in time, whatever holds it.

A loop held right now cannot answer `/livez` at all (the kubelet's probe times out, which fails it
as well); this check is for the loop held again and again, answering in between.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque

from prometheus_client import CollectorRegistry, Gauge

from sidecars.runtime.checks import CheckResult
from sidecars.runtime.settings import declared, duration

METRIC = "slurm_sidecars_event_loop_lag_seconds"
CHECK = "event_loop_lag"  # the liveness check's name, in /livez's answer
TASK = "event-loop-lag"  # the root task's name
INTERVAL_SECONDS = 0.25  # how often the loop is asked to wake
WINDOW_SECONDS = 30.0  # liveness judges the worst lag over this much of the recent past


@declared()
class LoopLagSettings:
    bound_seconds: float = duration(
        10.0,
        "/livez fails when the event loop ran this late in the last 30 s",
        flag="--loop-lag-bound-seconds",
    )


class LoopLag:
    """`run()` is the root task; `check()` a liveness check; the gauge is the worst lag since the
    last scrape's window (`WINDOW_SECONDS`)."""

    def __init__(self, registry: CollectorRegistry, settings: LoopLagSettings) -> None:
        self.bound = settings.bound_seconds
        self.gauge = Gauge(
            METRIC,
            f"How late the event loop ran: the worst lag over the last {WINDOW_SECONDS:g} s",
            registry=registry,
        )
        self._recent: deque[tuple[float, float]] = deque()  # (when measured, lag) in the window
        self._due = math.inf  # the next wake asked for (none before `run()` starts)
        self.ticks = 0  # wakes measured

    def worst(self, now: float | None = None) -> float:
        """The worst lag in the window, counting the wake overdue now (a loop held at this moment
        shows once it answers)."""
        now = time.monotonic() if now is None else now
        while self._recent and self._recent[0][0] < now - WINDOW_SECONDS:
            self._recent.popleft()
        overdue = max(0.0, now - self._due)
        return max([overdue, *(lag for _, lag in self._recent)])

    def record(self, lag: float, now: float) -> None:
        self.ticks += 1
        self._recent.append((now, lag))
        self.gauge.set(self.worst(now))

    async def run(self) -> None:
        while True:
            self._due = time.monotonic() + INTERVAL_SECONDS
            await asyncio.sleep(INTERVAL_SECONDS)
            now = time.monotonic()
            self.record(max(0.0, now - self._due), now)

    def check(self) -> CheckResult:
        worst = self.worst()
        if worst > self.bound:
            said = f"the event loop ran {worst:.2f}s late in the last {WINDOW_SECONDS:g}s"
            return CheckResult(False, f"{said} (bound {self.bound:g}s)")
        return CheckResult(True, f"worst lag {worst:.3f}s")
