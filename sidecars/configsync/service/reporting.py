"""What config-sync tells: `/status`, `/history`, the gauges, and the wait tests and the benchmark use
for an outcome. It is handed the daemon's state (state.py) and shows it; it changes none of it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from sidecars.configsync.apply.applier import Applier
from sidecars.configsync.dryrun.runner import DryRunner
from sidecars.configsync.fileset.stage import Applied
from sidecars.configsync.ha.control import Keeper
from sidecars.configsync.ha.coordination import Coordination
from sidecars.configsync.ha.return_gate import ReturnGate
from sidecars.configsync.ha.rollout import OUTCOMES, Rollout
from sidecars.configsync.report.history import History
from sidecars.configsync.report.record import Recorder
from sidecars.configsync.service.state import SyncState

__all__ = ["HAParts", "Reporter"]


@dataclass(frozen=True)
class HAParts:
    """With --peer only (ha/): this pod among the controllers, the rollout of a generation to every
    pod, a returning pod's gate, and what is done with no controller in control."""

    coordination: Coordination
    rollout: Rollout
    gate: ReturnGate
    keeper: Keeper


@dataclass
class Reporter:
    state: SyncState
    record: Recorder
    history: History
    dry_runner: Callable[[], DryRunner | None]  # the judge's, if it runs one (tests may take it away)
    applier: Applier | None  # slurmctld's (its workers, harm and node state); None for another daemon
    ha: HAParts | None = None
    # a daemon's own /status fields (slurmdbd's, slurmrestd's), merged at the top level
    extra: Callable[[], dict[str, Any]] | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    def history_view(self) -> dict[str, Any]:
        """`GET /history`: the last generations, newest first, with their diffs."""
        return self.history.as_json()

    def status(self) -> dict[str, Any]:
        st = self.state
        a, r = st.applied, st.rejected
        runner = self.dry_runner()
        out: dict[str, Any] = {
            "applied": None
            if a is None
            else {"generation": a.generation, "sha256": a.files.sha256, "at": a.at, "forced": st.forced},
            "rejected": None
            if r is None
            else {
                "sha256": r.sha256,
                "reason": r.reason,
                "at": r.at,
                "jobs": list(r.jobs),
                "held_by": r.held_by,  # the hold rule that holds it (configsync/holds), None: refused
            },
            "restart_required": bool(r and r.restart_required),
            "held_for_jobs": list(r.jobs) if r else [],
            "pending": st.pending,
            "dry_run": None
            if runner is None
            else {"isolation": runner.current_isolation, "release_mismatch": runner.release_mismatch},
            "restored": None if st.restored is None else asdict(st.restored),
            **self._slurmctld(),
        }
        if self.ha is not None:  # this pod among the controllers (ha/coordination.py)
            ha = out["ha"] = self.ha.coordination.status(None if a is None else a.files.sha256)
            ha["return"] = self.ha.gate.status()  # may a returning pod's slurmctld start yet
            ha["no_controller"] = self.ha.keeper.status()  # no controller in control, and what was done
            # applied only once every controller pod holds it (ha/rollout.py)
            rollout = ha["rollout"] = self.ha.rollout.status(a)
            if out["applied"] is not None:
                out["applied"]["outcome"] = OUTCOMES[rollout["state"]]
        if self.extra is not None:
            out.update(self.extra())
        return out

    def _slurmctld(self) -> dict[str, Any]:
        """What the last reconfigure of slurmctld did beyond the set (apply/): empty for another daemon."""
        applier = self.applier
        if applier is None:
            return {}
        return {
            # the workers' side of the last reconfigure (configsync/apply/workers.py), None before one
            "workers": None if applier.workers.last is None else applier.workers.last.as_json(),
            # the fleet's health around the last change, and what a rollback undid (harm.py)
            "harm": {
                "registration_wait_seconds": applier.registration_seconds,
                "last": None if applier.last_harm is None else applier.last_harm.as_json(),
                "undone": None if self.state.undone is None else self.state.undone.as_json(),
            },
            # the run-time node state the last reconfigure would have lost, put back (runstate.py)
            "node_state": None if (kept := applier.runstate.last) is None else kept.as_json(),
        }

    async def applied(self, new: Applied, old: Applied | None, **said: Any) -> None:
        """An applied or installed set; with peers, counted as applied once every pod holds it."""
        if self.ha is None:
            await self.record.applied(new, old, **said)
        else:
            await self.ha.rollout.applied(new, old, **said)

    async def notify(self) -> None:
        st = self.state
        self.record.gauges(st.pending, st.rejected, st.applied)
        async with self.changed:
            self.changed.notify_all()

    async def wait_until(self, pred: Callable[[dict[str, Any]], bool], within: float) -> dict[str, Any]:
        """Wait until /status satisfies `pred` (tests and the benchmark await outcomes, never sleep)."""
        async with asyncio.timeout(within), self.changed:
            while not pred(self.status()):
                await self.changed.wait()
        return self.status()
