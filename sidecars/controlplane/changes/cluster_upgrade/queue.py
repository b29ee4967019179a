"""Before slurmctld's stop in a whole-cluster upgrade: slurmdbd takes the records slurmctld holds
for it (those queued while slurmdbd moved, thousands on a busy cluster). A controller stopped with
them saves them beside its state, and the new release reads them back and sends them before it
answers any request: about 1.5 s per thousand records of unanswered controller, measured (U1)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sidecars.controlplane.changes.cluster_roles.roles import ClusterRoles

# records slurmctld may hold for slurmdbd at its stop: a busy cluster's queue is rarely empty, and
# this many cost the new controller's first answer about a tenth of a second
ACCOUNTING_QUEUE_SETTLED = 50


async def accounting_taken(
    roles: ClusterRoles,
    wait_seconds: float,
    interval_seconds: float,
    say: Callable[[str], Awaitable[None]],
    log: Any,
) -> str:
    """Wait (at most `wait_seconds`) until the queue is settled; told once through `say` when it
    has to wait. A note for the stage's detail when records stayed queued ("" when none did)."""
    deadline = time.monotonic() + wait_seconds
    said = False
    while True:
        try:
            queued = await roles.accounting_queue()
        except Exception as e:  # unknown: the stop goes on as it would without the wait
            log.warning("cluster_upgrade_accounting_queue_unread", error=str(e))
            return f"; slurmctld's queue for slurmdbd could not be read ({type(e).__name__}: {e})"
        if queued <= ACCOUNTING_QUEUE_SETTLED:
            return ""
        if time.monotonic() >= deadline:
            return (
                f"; {queued} records were still queued for slurmdbd after {wait_seconds:g}s: "
                "slurmctld saved them with its state and the new one sent them"
            )
        if not said:
            said = True
            await say(
                f"waiting for slurmdbd to take the {queued} records slurmctld holds for it, before its stop"
            )
        await asyncio.sleep(interval_seconds)
