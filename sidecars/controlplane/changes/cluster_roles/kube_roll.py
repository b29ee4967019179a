"""The workers' stage of a whole-cluster upgrade in Kubernetes: the control plane's own budgeted roll."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass

from sidecars.controlplane.changes.cluster_roles.roles import StageFailed
from sidecars.controlplane.changes.upgrade import Upgrade
from sidecars.slurm import Version, daemons


@dataclass(eq=False)
class BudgetedRoll:
    """The workers moved by the control plane's own roll (upgrade.py), `image` being the workers'
    revision as `upgrade start --revision` takes it; returns once every worker runs it, undrained."""

    upgrade: Upgrade
    budget: str
    releases: Callable[[], Awaitable[dict[str, Version]]]
    _: KW_ONLY
    interval_seconds: float = 2.0

    async def __call__(self, image: str, version: Version) -> None:
        found = await self.releases()
        controller = next((v for d, v in found.items() if d.startswith(f"{daemons.SLURMCTLD}:")), None)
        if controller is None:
            raise StageFailed("slurmctld's release was not read: the workers' roll cannot judge their skew")
        slurmds = {d.split(":", 1)[1]: v for d, v in found.items() if d.startswith(f"{daemons.SLURMD}:")}
        await self.upgrade.start(
            image,
            self.budget,
            controller=controller,
            slurmds=slurmds,
            target=version,
            slurmdbd=found.get(daemons.SLURMDBD),
        )
        # the roll is the leader's loop's (a step per refresh); it waits for jobs, never kills one
        while not (self.upgrade.report().get("upgrade") or {}).get("complete"):
            await asyncio.sleep(self.interval_seconds)
