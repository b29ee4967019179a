"""A token bucket: how the writers keep their Kubernetes writes within a rate (`--*-qps`)."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    def __init__(
        self, rate: float, clock: Callable[[], float] = time.monotonic, *, capacity: float | None = None
    ) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate if capacity is None else capacity)
        self._tokens = self.capacity
        self._clock = clock
        self._at = clock()

    def take(self) -> bool:
        now = self._clock()
        # a clock stepped back (the wall clock, corrected) adds nothing rather than taking tokens
        self._tokens = min(self.capacity, self._tokens + max(0.0, now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False
