"""For the writers' tests on real Slurm: the drained nodes and their reasons, and a wait for a few
more refresh + act cycles with nothing queued (to show that something did not happen)."""

from __future__ import annotations

from typing import Any

from sidecars.slurm import Node
from tests.helpers import eventually


def drains(nodes: list[Node]) -> dict[str, str | None]:
    """Slurm node -> the reason of its drain, for the drained ones."""
    return {n.name: n.reason.text if n.reason else None for n in nodes if n.state.drain}


async def settled(cp: Any, refreshes: int = 3) -> None:
    """A few more refresh + act cycles have run, and no drain is queued."""
    start = cp.sample("slurm_sidecars_fleet_refreshes_total", result="ok")
    await eventually(
        lambda: _sample(cp),
        lambda n: n >= start + refreshes,
        what=f"{refreshes} more refreshes",
    )
    await eventually(lambda: _pending(cp), lambda p: not p, what="no drain pending")


async def _sample(cp: Any) -> float:
    return float(cp.sample("slurm_sidecars_fleet_refreshes_total", result="ok"))


async def _pending(cp: Any) -> dict[str, Any]:
    return dict(cp.plane.drains.pending)
