"""How long an agent whose control plane is away waits before its next look (at Slurm, after
asking the control plane again): doubling from the drain poll up to a cap, half of each wait drawn
at random. A thousand draining agents then reach slurmctld at a few dozen calls a second, spread
out, instead of four thousand in lockstep (0.25 s each) just when the cluster is already in trouble.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    first_seconds: float
    max_seconds: float
    rng: random.Random = field(default_factory=random.Random)
    failures: int = 0  # in a row

    def failed(self) -> float:
        """One more failure in a row: the wait before the next try ("equal jitter": at least half
        of the doubled wait, so no agent spins, and the rest at random, so they do not align)."""
        self.failures += 1
        ceiling = min(self.max_seconds, self.first_seconds * 2.0 ** min(self.failures - 1, 30))
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.failures = 0
