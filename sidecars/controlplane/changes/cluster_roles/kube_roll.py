"""The workers' stage of a whole-cluster upgrade in Kubernetes: the control plane's own budgeted roll."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sidecars.controlplane.changes.cluster_roles.roles import StageFailed
from sidecars.controlplane.changes.upgrade import Upgrade
from sidecars.slurm import Version, daemons


class BudgetedRoll:
    """The workers moved by the control plane's own roll (upgrade.py), `image` being the workers'
    revision as `upgrade start --revision` takes it; returns once every worker runs it, undrained."""

    def __init__(
        self,
        upgrade: Upgrade,
        budget: str,
        releases: Callable[[], Awaitable[dict[str, Version]]],
        *,
        interval_seconds: float = 2.0,
    ) -> None:
        self._upgrade = upgrade
        self._budget = budget
        self._releases = releases
        self._interval = interval_seconds

    async def __call__(self, image: str, version: Version) -> None:
        found = await self._releases()
        controller = next((v for d, v in found.items() if d.startswith(f"{daemons.SLURMCTLD}:")), None)
        if controller is None:
            raise StageFailed("slurmctld's release was not read: the workers' roll cannot judge their skew")
        slurmds = {d.split(":", 1)[1]: v for d, v in found.items() if d.startswith(f"{daemons.SLURMD}:")}
        await self._upgrade.start(
            image,
            self._budget,
            controller=controller,
            slurmds=slurmds,
            target=version,
            slurmdbd=found.get(daemons.SLURMDBD),
        )
        # the roll is the leader's loop's (a step per refresh); it waits for jobs, never kills one
        while not (self._upgrade.report().get("upgrade") or {}).get("complete"):
            await asyncio.sleep(self._interval)
