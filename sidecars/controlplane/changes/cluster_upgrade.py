"""A whole-cluster Slurm upgrade in Slurm's order, as stages: preflight, slurmdbd, slurmctld, workers.

Each stage acts through a `ClusterRoles` (the seam): in Kubernetes an image or revision change of
that role's workload (not written yet: docs/upgrades.md), in the dev cluster (the tests, U1) the
release swap of one daemon (`sidecars/devcluster/swap_roles.py`). The machine itself decides order,
verification and rollback:

- preflight: every daemon's release read (slurmdbd's included); the target within Slurm's window
  from each; room for the database backup and the state copy. A refusal changes nothing.
- slurmdbd: a database backup, then the new slurmdbd (it converts the tables at its start), verified
  by reading its release back. A failure is NOT rolled back: the tables may be half converted, and
  an older slurmdbd on them is what Slurm warns against. The stage ends `failed`, the upgrade halts,
  slurmctld keeps running and queues its records for slurmdbd (nothing is lost while the queue
  holds), and the status names the backup to restore from (docs/upgrades.md).
- slurmctld: once slurmdbd took the records the controller held for it (those of slurmdbd's move;
  a bounded wait), the controller stopped (it saves its state), the StateSaveLocation copied, the new
  controller started on the same state, verified by its release, every job and every node read
  back. When it does not come up, or comes up missing a job or a node, the old controller goes back
  on the saved copy, automatically: the stage ends `rolled_back`. Several controllers (HA) are refused
  by the preflight for now: the rollback restores one controller under the others.
- workers: a budgeted roll (drain, replace, undrain: in Kubernetes the control plane's own roll,
  upgrade.py; in the dev cluster the roles' drain-first swap); a worker that never comes back
  stops the roll with that worker left drained, its reason ours.

Between stages the upgrade can be paused; it then waits before the next stage starts.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import structlog

from sidecars.controlplane.changes.cluster_upgrade_window import refusal
from sidecars.slurm import Version, daemons

log = structlog.get_logger(__name__)

STAGES = ("preflight", daemons.SLURMDBD, daemons.SLURMCTLD, "workers")
# a stage's states; the upgrade's own state is the last stage's that is not `pending`
STATES = ("pending", "running", "done", "skipped", "refused", "failed", "rolled_back")
ENDINGS = {"refused", "failed", "rolled_back"}  # the upgrade halts here
# records slurmctld may hold for slurmdbd at its stop: a busy cluster's queue is rarely empty, and
# this many cost the new controller's first answer about a tenth of a second
ACCOUNTING_QUEUE_SETTLED = 50


class StageFailed(Exception):
    """A stage's action did not reach its goal; the message says what was seen."""


class ClusterRoles(Protocol):
    """What a whole-cluster upgrade needs from where the daemons run (Kubernetes, or the dev cluster).

    `image` is what the role moves to: a container image or revision in Kubernetes, a release's
    name in the dev cluster. Every method raises (any Exception, with a message that says why)
    when it could not do what it says."""

    async def versions(self) -> dict[str, Version]:
        """Daemon -> running release: "slurmdbd", "slurmctld:<host>", "slurmd:<node>"."""
        ...

    async def room(self) -> list[tuple[str, int, int]]:
        """(what, bytes needed, bytes free) for the database backup and the state copy."""
        ...

    def controllers(self) -> list[str]:
        """The controllers' hosts, backups first and the primary last (it moves last)."""
        ...

    async def backup_database(self) -> str:
        """Dump the accounting database; where the dump is."""
        ...

    async def replace_slurmdbd(self, image: str) -> None:
        """Stop slurmdbd and start `image`'s on the same database; return once it answers."""
        ...

    async def stop_slurmctld(self, controller: str) -> None:
        """Stop the controller as Slurm does (its state saved first)."""
        ...

    async def copy_state(self) -> str:
        """Copy the StateSaveLocation (every controller stopped, or this one); where the copy is."""
        ...

    async def start_slurmctld(self, controller: str, image: str) -> None:
        """Start `image`'s controller on the state as it is; return once it answers."""
        ...

    async def restore_slurmctld(self, controller: str, saved: str) -> None:
        """Stop whatever runs for `controller`, put the copy `saved` back as the StateSaveLocation
        and start the release it ran before the upgrade; return once it answers."""
        ...

    async def jobs(self) -> dict[int, str]:
        """Job id -> state, as slurmctld lists them."""
        ...

    async def accounting_queue(self) -> int:
        """The records slurmctld holds for slurmdbd that slurmdbd has not taken yet."""
        ...

    async def nodes(self) -> set[str]:
        """The node names slurmctld lists."""
        ...

    async def roll_workers(self, image: str, version: Version) -> None:
        """Move every worker to `image` by the budgeted roll (drained first, no job killed)."""
        ...


@dataclass
class Stage:
    name: str
    state: str = "pending"
    started_at: float | None = None  # epoch seconds
    seconds: float | None = None
    detail: str = ""


@dataclass
class ClusterUpgradeStatus:
    target: str
    images: dict[str, str]
    stages: list[Stage] = field(default_factory=lambda: [Stage(n) for n in STAGES])
    paused: bool = False
    # the time slurmctld did not answer during its stage (stop to verified), in seconds
    slurmctld_unanswered_seconds: float | None = None
    backup: str = ""  # where the database dump is
    state_copy: str = ""  # where the copy of the StateSaveLocation is

    @property
    def state(self) -> str:
        """pending, running, paused (between stages), complete, or the stage ending that halted it."""
        for s in self.stages:
            if s.state in ENDINGS:
                return s.state
        if all(s.state in ("done", "skipped") for s in self.stages):
            return "complete"
        if any(s.state == "running" for s in self.stages):
            return "running"
        if self.paused:
            return "paused"
        return "running" if self.stages[0].state != "pending" else "pending"

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def report(self) -> dict[str, Any]:
        return {"state": self.state, **asdict(self)}


# (stage, state, message): a Kubernetes Event, a log line, a metric
Emit = Callable[[str, str, str], Awaitable[None]]


class ClusterUpgrade:
    """One upgrade to `target`, stage by stage; `run()` returns the final state."""

    def __init__(
        self,
        roles: ClusterRoles,
        target: Version,
        images: Mapping[str, str],
        *,
        emit: Emit | None = None,
        verify_timeout_seconds: float = 60.0,
        verify_interval_seconds: float = 0.5,
        accounting_wait_seconds: float = 300.0,
    ) -> None:
        missing = [r for r in daemons.UPGRADE_ORDER if not images.get(r)]
        if missing:
            raise ValueError(f"no image (or release) given for {', '.join(missing)}")
        self.roles = roles
        self.target = target
        self.status = ClusterUpgradeStatus(str(target), dict(images))
        self._emit = emit
        self._verify_timeout = verify_timeout_seconds
        self._verify_interval = verify_interval_seconds
        self._accounting_wait = accounting_wait_seconds
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._log = log.bind(target=str(target))

    # ------------------------------------------------------------------ pause and resume
    def pause(self) -> None:
        """Hold the upgrade before its next stage (a stage under way finishes)."""
        self.status.paused = True
        self._resumed.clear()

    def resume(self) -> None:
        self.status.paused = False
        self._resumed.set()

    # ------------------------------------------------------------------ the stages
    async def run(self) -> str:
        running = await self._stage("preflight", self._preflight)
        if running is None:
            return self.status.state
        for name, act in (
            (daemons.SLURMDBD, self._slurmdbd),
            (daemons.SLURMCTLD, self._slurmctld),
            ("workers", self._workers),
        ):
            await self._between_stages(name)
            if await self._stage(name, functools.partial(act, running)) is None:
                break
        self._log.info("cluster_upgrade_finished", state=self.status.state)
        return self.status.state

    async def _between_stages(self, name: str) -> None:
        if not self._resumed.is_set():
            await self._say(name, "pending", f"paused before the {name} stage: resume to go on")
            await self._resumed.wait()

    async def _stage(self, name: str, act: Callable[[], Awaitable[tuple[str, str, Any]]]) -> Any | None:
        """Run one stage; its (state, detail, value). None when the upgrade must halt here."""
        stage = self.status.stage(name)
        stage.state, stage.started_at = "running", time.time()
        began = time.monotonic()
        await self._say(name, "running", f"{name} stage started")
        try:
            state, detail, value = await act()
        except StageFailed as e:
            state, detail, value = "failed", str(e), None
        except Exception as e:  # any failure of the seam ends the stage with its words
            state, detail, value = "failed", f"{type(e).__name__}: {e}", None
        stage.state, stage.detail, stage.seconds = state, detail, round(time.monotonic() - began, 3)
        await self._say(name, state, detail)
        return None if state in ENDINGS else value

    async def _say(self, stage: str, state: str, message: str) -> None:
        self._log.info("cluster_upgrade_stage", stage=stage, state=state, detail=message)
        if self._emit is not None:
            try:
                await self._emit(stage, state, message)
            except Exception as e:  # an Event not written never stops an upgrade
                self._log.warning("cluster_upgrade_emit_failed", stage=stage, error=str(e))

    async def _preflight(self) -> tuple[str, str, dict[str, Version]]:
        try:
            running = await self.roles.versions()
        except Exception as e:  # a daemon not answering: its release is unknown, so nothing moves
            unread = f"{type(e).__name__}: {e}"
            return "refused", f"refused, nothing changed: a daemon's release could not be read: {unread}", {}
        why = refusal(self.target, running)
        if why is None and len(self.roles.controllers()) > 1:
            # the rollback restores one controller's state under the others: not safe with several yet
            why = "several controllers (HA): this upgrade moves one slurmctld only, for now"
        if why is not None:
            return "refused", f"refused, nothing changed: {why}", running
        room = await self.roles.room()
        tight = [f"{what} ({need} bytes needed, {free} free)" for what, need, free in room if need > free]
        if tight:
            return "refused", f"refused, nothing changed: no room for {'; '.join(tight)}", running
        seen = ", ".join(f"{d} {v}" for d, v in sorted(running.items()))
        return "done", f"target {self.target} within Slurm's window from: {seen}", running

    async def _slurmdbd(self, running: dict[str, Version]) -> tuple[str, str, dict[str, Version]]:
        if _same(running[daemons.SLURMDBD], self.target):
            return "skipped", f"slurmdbd already runs {running[daemons.SLURMDBD]}", running
        self.status.backup = await self.roles.backup_database()
        try:
            await self.roles.replace_slurmdbd(self.status.images[daemons.SLURMDBD])
            now = (await self.roles.versions()).get(daemons.SLURMDBD)
        except Exception as e:  # said in the stage's words below
            return (
                "failed",
                f"the new slurmdbd did not come up ({type(e).__name__}: {e}); not rolled back: its "
                "database may be partly converted, and an older slurmdbd must not run on it. "
                "slurmctld keeps running and queues its records for slurmdbd. Restore the backup "
                f"{self.status.backup} and start the old slurmdbd, or fix the cause and start the new "
                "one (docs/upgrades.md, When slurmdbd fails)",
                running,
            )
        if now is None or not _same(now, self.target):
            return "failed", f"slurmdbd answers but runs {now}, not {self.target}", running
        return "done", f"slurmdbd {now} on the converted database; backup at {self.status.backup}", running

    async def _slurmctld(self, running: dict[str, Version]) -> tuple[str, str, dict[str, Version]]:
        controllers = self.roles.controllers()
        if all(_same(running.get(f"slurmctld:{c}", self.target), self.target) for c in controllers):
            return "skipped", "every slurmctld already runs the target", running
        queued = await self._accounting_taken()
        jobs_before = await self.roles.jobs()
        nodes_before = await self.roles.nodes()
        stopped = time.monotonic()
        for i, controller in enumerate(controllers):
            await self.roles.stop_slurmctld(controller)
            if i == 0:
                self.status.state_copy = await self.roles.copy_state()
            try:
                await self.roles.start_slurmctld(controller, self.status.images[daemons.SLURMCTLD])
                await self._verify_controller(controller, jobs_before, nodes_before)
            except Exception as e:  # the rollback says what happened
                state, detail = await self._roll_back(controller, e, jobs_before, nodes_before, stopped)
                return state, detail, running
        self.status.slurmctld_unanswered_seconds = round(time.monotonic() - stopped, 3)
        return (
            "done",
            f"slurmctld {self.target} on the same state: {len(jobs_before)} jobs and "
            f"{len(nodes_before)} nodes read back; state copy at {self.status.state_copy}{queued}",
            running,
        )

    async def _accounting_taken(self) -> str:
        """Wait (at most `accounting_wait_seconds`) until slurmdbd took the records the old
        controller holds for it: the ones queued while slurmdbd was moved, thousands on a busy
        cluster. A controller stopped with them saves them beside its state, and the new release
        reads them back and sends them before it answers any request: about 1.5 s per thousand
        records of unanswered controller, measured. A note for the stage's detail when some
        stayed queued ("" when none did)."""
        deadline = time.monotonic() + self._accounting_wait
        said = False
        while True:
            try:
                queued = await self.roles.accounting_queue()
            except Exception as e:  # unknown: the stop goes on as it would without the wait
                self._log.warning("cluster_upgrade_accounting_queue_unread", error=str(e))
                return f"; slurmctld's queue for slurmdbd could not be read ({type(e).__name__}: {e})"
            if queued <= ACCOUNTING_QUEUE_SETTLED:
                return ""
            if time.monotonic() >= deadline:
                return (
                    f"; {queued} records were still queued for slurmdbd after {self._accounting_wait:g}s: "
                    "slurmctld saved them with its state and the new one sent them"
                )
            if not said:
                said = True
                await self._say(
                    daemons.SLURMCTLD,
                    "running",
                    f"waiting for slurmdbd to take the {queued} records slurmctld holds for it, "
                    "before its stop",
                )
            await asyncio.sleep(self._verify_interval)

    async def _roll_back(
        self,
        controller: str,
        cause: Exception,
        jobs_before: dict[int, str],
        nodes_before: set[str],
        stopped: float,
    ) -> tuple[str, str]:
        """Put the old slurmctld back on the saved state; the stage's state and detail after it."""
        why = f"the new slurmctld on {controller} failed: {cause}"
        await self._say(daemons.SLURMCTLD, "running", f"{why}; rolling back to the saved state")
        try:
            await self.roles.restore_slurmctld(controller, self.status.state_copy)
            await self._verify_controller(controller, jobs_before, nodes_before, expect_target=False)
        except Exception as e:  # said in full: the operator must act
            return "failed", (
                f"{why}; the rollback failed too ({type(e).__name__}: {e}): the state copy is at "
                f"{self.status.state_copy} (docs/upgrades.md, When slurmctld fails)"
            )
        self.status.slurmctld_unanswered_seconds = round(time.monotonic() - stopped, 3)
        return "rolled_back", (
            f"{why}; rolled back: the old slurmctld runs on the saved state with all "
            f"{len(jobs_before)} jobs and {len(nodes_before)} nodes"
        )

    async def _verify_controller(
        self,
        controller: str,
        jobs_before: dict[int, str],
        nodes_before: set[str],
        *,
        expect_target: bool = True,
    ) -> None:
        """Poll until the controller answers, then judge its first answer: the release expected,
        every live job and every node it had (a job that ended meanwhile may have aged out).

        The first answer is final: slurmctld loads its whole state before it serves a request, so
        a job missing then stays missing; and a controller without a job kills it as an orphan as
        soon as its node registers (seconds after its start), so it must be stopped at once."""
        live = {j for j, s in jobs_before.items() if s in ("PENDING", "RUNNING", "SUSPENDED", "CONFIGURING")}
        deadline = time.monotonic() + self._verify_timeout
        while True:
            try:
                jobs, nodes = await self.roles.jobs(), await self.roles.nodes()
                runs = (await self.roles.versions()).get(f"slurmctld:{controller}")
                break
            except Exception as e:  # not answering yet: polled again until the deadline
                if time.monotonic() >= deadline:
                    raise StageFailed(
                        f"it did not answer within {self._verify_timeout:g}s: {type(e).__name__}: {e}"
                    ) from None
            await asyncio.sleep(self._verify_interval)
        missing_jobs, missing_nodes = sorted(live - set(jobs)), sorted(nodes_before - nodes)
        if expect_target and (runs is None or not _same(runs, self.target)):
            raise StageFailed(f"it runs {runs}, not {self.target}")
        if missing_jobs or missing_nodes:
            raise StageFailed(
                f"it came up missing jobs {missing_jobs[:20]} ({len(missing_jobs)}) and nodes "
                f"{missing_nodes[:20]} ({len(missing_nodes)})"
            )

    async def _workers(self, running: dict[str, Version]) -> tuple[str, str, dict[str, Version]]:
        old = [d for d, v in running.items() if d.startswith("slurmd:") and not _same(v, self.target)]
        if not old:
            return "skipped", "every slurmd already runs the target", running
        await self.roles.roll_workers(self.status.images[daemons.SLURMD], self.target)
        now = await self.roles.versions()
        behind = sorted(d for d, v in now.items() if d.startswith("slurmd:") and not _same(v, self.target))
        if behind:
            return "failed", f"the roll ended with {', '.join(behind)} not on {self.target}", running
        return "done", f"{len(old)} workers moved to {self.target}", running


def _same(a: Version, b: Version) -> bool:
    """The same major release (a micro release is not a step in Slurm's window)."""
    return (a.major, a.minor) == (b.major, b.minor)
