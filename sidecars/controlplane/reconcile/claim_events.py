"""A Warning Event on each worker pod refused its Slurm node (fleet.claims decides; reported once,
and again only when what it says changes)."""

from __future__ import annotations

from sidecars.controlplane.fleet.claims import Claims
from sidecars.controlplane.reconcile.round import Outcome, PodEmit, View
from sidecars.protocol.events import EventReason


class ClaimEvents:
    name = "claim_events"

    def __init__(self, claims: Claims, emit: PodEmit) -> None:
        self._claims = claims
        self._emit = emit

    async def reconcile(self, view: View) -> Outcome:
        made = 0
        for refused in self._claims.to_report():
            await self._emit(refused.pod, EventReason.SLURM_NODE_CLAIM_REFUSED, refused.message(), "Warning")
            made += 1
        return Outcome(made)
