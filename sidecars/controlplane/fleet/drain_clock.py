"""The drains in progress (drained nodes still running work), the one record of them: when each
started (when we wrote it, else when first seen), which of them we wrote, and the drains completed
lately. The refresh loop reads `ours` to refresh fast while they last; the page shows them all."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sidecars.controlplane.fleet.snapshot import FleetSnapshot


@dataclass
class DrainClock:
    clock: Callable[[], float] = time.time
    started: dict[str, float] = field(default_factory=dict)
    ours: set[str] = field(default_factory=set)  # of `started`, the drains we wrote
    done: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=20))

    def written(self, names: set[str]) -> None:
        now = self.clock()
        for name in names:
            self.started.setdefault(name, now)
        self.ours |= names

    def observe(self, snap: FleetSnapshot) -> None:
        now = self.clock()
        keep: dict[str, float] = {}
        for name, node in snap.nodes.items():
            if node.drain and node.busy:
                keep[name] = self.started.get(name, now)
            elif name in self.started and node.drain:
                self.done.append({"node": name, "started_at": self.started[name], "done_at": now})
        self.started = keep
        self.ours &= keep.keys()
