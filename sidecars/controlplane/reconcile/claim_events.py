"""A Warning Event on each worker pod refused its Slurm node (fleet.claims decides; reported once,
and again only when what it says changes)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sidecars.controlplane.fleet.claims import Claims
from sidecars.controlplane.reconcile.round import Outcome, View
from sidecars.kube import Pod
from sidecars.runtime.events import EventType

Emit = Callable[[Pod, str, str, EventType], Awaitable[None]]


class ClaimEvents:
    name = "claim_events"

    def __init__(self, claims: Claims, emit: Emit) -> None:
        self._claims = claims
        self._emit = emit

    async def reconcile(self, view: View) -> Outcome:
        made = 0
        for refused in self._claims.to_report():
            await self._emit(refused.pod, "SlurmNodeClaimRefused", refused.message(), "Warning")
            made += 1
        return Outcome(made)
