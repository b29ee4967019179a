"""What one look at the node found, whichever source took it (Slurm itself or the control plane)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from sidecars.slurm.nodejson import NodeRecord

Origin = Literal["slurm", "control-plane"]


@dataclass(frozen=True, slots=True)
class Observation:
    """One look at the node. `view is None and error is None`: Slurm has no record of it.
    `error`: the look failed and nothing is known (a failed lookup never counts as drained)."""

    origin: Origin
    view: NodeRecord | None = None
    error: str | None = None
    controller_down: bool = False
    at: float = field(default_factory=time.monotonic)

    @property
    def ok(self) -> bool:
        return self.error is None
