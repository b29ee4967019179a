"""For the writers' tests on real Slurm: the drained nodes and their reasons, and a wait for a few
more refresh + act cycles with nothing queued (to show that something did not happen)."""

from __future__ import annotations

import asyncio
from typing import Any

from sidecars.slurm import Node
from tests.helpers import eventually


def drains(nodes: list[Node]) -> dict[str, str | None]:
    """Slurm node -> the reason of its drain, for the drained ones."""
    return {n.name: n.reason.text if n.reason else None for n in nodes if n.state.drain}


async def settled(cp: Any, refreshes: int = 3, *, pending_ok: bool = False) -> None:
    """A few more refresh + act cycles have run, and no drain is queued (unless `pending_ok`: a
    test that holds the batcher's queue itself)."""
    start = cp.sample("slurm_sidecars_fleet_refreshes_total", result="ok")
    rounds = _rounds(cp)
    await eventually(
        lambda: _sample(cp),
        lambda n: n >= start + refreshes,
        what=f"{refreshes} more refreshes",
    )
    # the writers run in their own loop after a refresh; on a loaded machine a round can outlast
    # refreshes, and its late Events and counts with it: two more ends of a round mean that one
    # began after the start and ended
    await eventually(
        lambda: asyncio.sleep(0.05, _rounds(cp)), lambda n: n >= rounds + 2, what="2 more rounds"
    )
    if not pending_ok:
        await eventually(lambda: _pending(cp), lambda p: not p, what="no drain pending")


def _rounds(cp: Any) -> float:
    """Passes of the last writer (by any result): the ends of the act loop's rounds (none without
    writers: nothing to wait for then)."""
    writers = cp.plane.writers.writers
    if not writers:
        return float("inf")
    name = writers[-1].name
    return sum(
        cp.sample("slurm_sidecars_reconcile_passes_total", writer=name, result=r)
        for r in ("ok", "skipped", "error")
    )


async def _sample(cp: Any) -> float:
    return float(cp.sample("slurm_sidecars_fleet_refreshes_total", result="ok"))


async def _pending(cp: Any) -> dict[str, Any]:
    return dict(cp.plane.drains.pending)
