"""Held for a restart: a change only a restart of the daemon takes, under `--restart-policy hold`
(the default restarts it). Not for a set the daemon is about to start on."""

from __future__ import annotations

from sidecars.configsync.holds.rule import Change, Hold
from sidecars.protocol.configsync import ConfigOutcome
from sidecars.protocol.events import EventReason
from sidecars.slurm import daemons

__all__ = ["RestartPolicy"]


class RestartPolicy:
    name = "restart_policy"
    outcome = ConfigOutcome.RESTART_REQUIRED
    event = EventReason.CONFIG_RESTART_REQUIRED
    again = False  # the set needs the restart whatever Slurm does: only a new set is judged

    async def holds(self, change: Change) -> Hold | None:
        verdict = change.verdict
        if change.installs or not verdict.restart_required or change.settings.restart_policy != "hold":
            return None
        what = (
            "restart required"
            if change.daemon == daemons.SLURMCTLD
            else f"restart of {change.daemon} required"
        )
        return Hold(what + ": " + "; ".join(str(r) for r in verdict.restart), restart_required=True)
