"""What config-sync tells: `/status`, `/history`, the gauges, and the wait tests and the benchmark use
for an outcome. The daemon (service/daemon.py) holds the state; this is how it is shown."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from sidecars.configsync.apply.applier import Applier
from sidecars.configsync.apply.harm import Undone
from sidecars.configsync.fileset.stage import Applied, Restored
from sidecars.configsync.ha.control import Keeper
from sidecars.configsync.ha.coordination import Coordination
from sidecars.configsync.ha.return_gate import ReturnGate
from sidecars.configsync.ha.rollout import OUTCOMES, Rollout
from sidecars.configsync.judge.validate import Judge
from sidecars.configsync.report.history import History
from sidecars.configsync.report.record import Recorder, Rejection

__all__ = ["Reporting"]


class Reporting:
    """The part of the daemon that reports; the attributes are set by ConfigSync.__init__."""

    applied: Applied | None
    rejected: Rejection | None
    forced: dict[str, Any] | None
    restored: Restored | None
    undone: Undone | None
    pending: bool
    validator: Judge
    applier: Applier
    history: History
    record: Recorder
    ha: Coordination | None
    rollout: Rollout | None
    gate: ReturnGate | None
    keeper: Keeper | None
    _changed: asyncio.Condition
    _wake: asyncio.Event

    def history_view(self) -> dict[str, Any]:
        """`GET /history`: the last generations, newest first, with their diffs."""
        return self.history.as_json()

    def status(self) -> dict[str, Any]:
        a, r = self.applied, self.rejected
        runner = self.validator.dry_runner
        out: dict[str, Any] = {
            "applied": None
            if a is None
            else {"generation": a.generation, "sha256": a.files.sha256, "at": a.at, "forced": self.forced},
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
            "pending": self.pending,
            "dry_run": None
            if runner is None
            else {"isolation": runner.current_isolation, "release_mismatch": runner.release_mismatch},
            # the workers' side of the last reconfigure (configsync/apply/workers.py), None before one
            "workers": None if self.applier.workers.last is None else self.applier.workers.last.as_json(),
            "restored": None if self.restored is None else asdict(self.restored),
            # the fleet's health around the last change, and what a rollback undid (harm.py)
            "harm": {
                "registration_wait_seconds": self.applier.registration_seconds,
                "last": None if self.applier.last_harm is None else self.applier.last_harm.as_json(),
                "undone": None if self.undone is None else self.undone.as_json(),
            },
            # the run-time node state the last reconfigure would have lost, put back (runstate.py)
            "node_state": None if (kept := self.applier.runstate.last) is None else kept.as_json(),
        }
        if self.ha is not None:  # with --peer only (ha/coordination.py): this pod among the controllers
            out["ha"] = self.ha.status(None if a is None else a.files.sha256)
            if self.gate is not None:  # a returning pod: may its slurmctld start yet (ha/return_gate.py)
                out["ha"]["return"] = self.gate.status()
            if self.keeper is not None:  # no controller in control, and what was done (ha/control.py)
                out["ha"]["no_controller"] = self.keeper.status()
        if self.rollout is not None:  # applied only once every controller pod holds it (ha/rollout.py)
            rollout = out["ha"]["rollout"] = self.rollout.status(a)
            if out["applied"] is not None:
                out["applied"]["outcome"] = OUTCOMES[rollout["state"]]
        return out

    async def _record_applied(self, new: Applied, old: Applied | None, **said: Any) -> None:
        """An applied or installed set; with peers, counted as applied once every pod holds it."""
        if self.rollout is None:
            await self.record.applied(new, old, **said)
        else:
            await self.rollout.applied(new, old, **said)

    async def _notify(self) -> None:
        self.record.gauges(self.pending, self.rejected, self.applied)
        async with self._changed:
            self._changed.notify_all()

    async def wait_until(self, pred: Callable[[dict[str, Any]], bool], within: float) -> dict[str, Any]:
        """Wait until /status satisfies `pred` (tests and the benchmark await outcomes, never sleep)."""
        async with asyncio.timeout(within), self._changed:
            while not pred(self.status()):
                await self._changed.wait()
        return self.status()

    def wake(self) -> None:
        self._wake.set()
