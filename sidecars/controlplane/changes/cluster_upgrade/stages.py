"""A whole-cluster Slurm upgrade in Slurm's order, as stages: preflight, slurmdbd, slurmctld, workers.

Each stage acts through a `ClusterRoles` (cluster_roles/roles.py): in Kubernetes an image change of that
role's workload (cluster_roles/kube.py), in the dev cluster the release swap of one daemon
(devcluster/swap_roles.py). The machine itself decides order, verification and rollback:

- preflight: every daemon's release read (slurmdbd's included); the target within Slurm's window
  from each; room for the database backup and the state copy. A refusal changes nothing.
- slurmdbd: a database backup, then the new slurmdbd (it converts the tables at its start), verified
  by its release. A failure is NOT rolled back (the tables may be half converted): the upgrade halts,
  slurmctld queues its records meanwhile, and the status names the backup (docs/upgrades.md).
- slurmctld: once slurmdbd took the records queued for it (bounded), the controller stopped (its
  state saved) and the StateSaveLocation copied, the new one started on the same state, verified by
  its release and every job and node read back; else the old one goes back on the saved copy
  (`rolled_back`). HA controllers move one at a time, backups first and the primary last.
- workers: a budgeted roll (drain, replace, undrain: in Kubernetes the control plane's own roll,
  upgrade.py; in the dev cluster the roles' drain-first swap); a worker that never comes back
  stops the roll with that worker left drained, its reason ours.

Between stages the upgrade can be paused; it then waits before the next stage starts. The status
is handed to `save` at each stage's start and end and at each rollback point, so that an upgrade cut
by its control plane's end is found (`interrupted`) and can be started again from there (`resume`).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from sidecars.controlplane.changes.cluster_roles.roles import (
    ClusterRoles,
    StageFailed,
    has_accounting,
    memory_of,
    recall,
)
from sidecars.controlplane.changes.cluster_upgrade.queue import accounting_taken
from sidecars.controlplane.changes.cluster_upgrade.status import (
    ENDINGS,
    LIVE_JOBS,
    NO_RELEASE,
    PAUSED,
    ROLLING_BACK,
    ClusterUpgradeStatus,
    same_release,
)
from sidecars.controlplane.changes.cluster_upgrade.verify import controller_verified
from sidecars.controlplane.changes.cluster_upgrade.window import refusal
from sidecars.slurm import Version, daemons
from sidecars.slurm.lastwords import DaemonExited

log = structlog.get_logger(__name__)

# (stage, state, message): a Kubernetes Event, a log line, a metric. `state` is a stage's state, or
# ROLLING_BACK (a rollback begun, the stage still running) or PAUSED (held before that stage)
Emit = Callable[[str, str, str], Awaitable[None]]
# the status, to be kept where a later control plane reads it; raises when it could not be kept
Save = Callable[["ClusterUpgradeStatus"], Awaitable[None]]


class ClusterUpgrade:
    """One upgrade to `target`, stage by stage; `run()` returns the final state.

    `resume`: the status of an upgrade to the same target that halted or was interrupted; its
    backup, state copy and the jobs and nodes slurmctld had are kept, and each stage is run again
    (one whose role already runs the target is skipped; a slurmctld stage cut under way goes on)."""

    def __init__(
        self,
        roles: ClusterRoles,
        target: Version,
        images: Mapping[str, str],
        *,
        emit: Emit | None = None,
        save: Save | None = None,
        resume: ClusterUpgradeStatus | None = None,
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
        self._before: ClusterUpgradeStatus | None = None
        if resume is not None:
            if resume.target != str(target):
                raise ValueError(f"the upgrade to resume went to {resume.target}, not {target}")
            halted = resume.halted_at()
            self._before = resume
            self.status.resumed_from = halted.name if halted is not None else ""
            self.status.backup, self.status.state_copy = resume.backup, resume.state_copy
            self.status.jobs_before, self.status.nodes_before = resume.jobs_before, resume.nodes_before
            self.status.roles_memory = dict(resume.roles_memory)
        self._emit = emit
        self._save = save
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
        if self._before is not None:  # after the preflight, which starts the roles afresh
            recall(self.roles, self._before.roles_memory)
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
            await self._say(name, PAUSED, f"paused before the {name} stage: resume to go on")
            await self._resumed.wait()

    async def _stage(self, name: str, act: Callable[[], Awaitable[tuple[str, str, Any]]]) -> Any | None:
        """Run one stage; its (state, detail, value). None when the upgrade must halt here."""
        stage = self.status.stage(name)
        stage.state, stage.started_at = "running", time.time()
        began = time.monotonic()
        try:
            # kept before anything moves: a control plane that stops now leaves this stage's start
            # for the next one to find (an upgrade nobody could see must not go on)
            await self.checkpoint(required=True)
        except Exception as e:  # the store's words
            stage.state, stage.seconds = "failed", 0.0
            stage.detail = f"not started: the upgrade's status could not be kept ({type(e).__name__}: {e})"
            await self._say(name, "failed", stage.detail)
            return None
        await self._say(name, "running", f"{name} stage started")
        try:
            state, detail, value = await act()
        except StageFailed as e:
            self._note_death(name, e)
            state, detail, value = "failed", str(e), None
        except Exception as e:  # any failure of the seam ends the stage with its words
            self._note_death(name, e)
            state, detail, value = "failed", f"{type(e).__name__}: {e}", None
        stage.state, stage.detail, stage.seconds = state, detail, round(time.monotonic() - began, 3)
        await self.checkpoint()
        await self._say(name, state, detail)
        return None if state in ENDINGS else value

    def _note_death(self, name: str, failure: BaseException) -> None:
        """Where `failure` is (or was caused by) a daemon's death: its last words and time on the
        stage, and now as the time the stage acted on it (the rollback begins, or the stage halts)."""
        died = exited(failure)
        if died is None:
            return
        stage = self.status.stage(name)
        stage.last_words, stage.died_at, stage.acted_at = died.words, died.died_at, time.time()
        self._log.warning(
            "cluster_upgrade_daemon_died",
            stage=name,
            daemon=died.daemon,
            last_words=died.words,
            acted_after_seconds=round(stage.acted_at - died.died_at, 3),
        )

    async def checkpoint(self, *, required: bool = False) -> None:
        """Keep the status (`save`); a failure raises when `required`, else is logged: a stage under
        way is not cut for it, and the next checkpoint writes everything again."""
        if self._save is None:
            return
        self.status.roles_memory = memory_of(self.roles) or self.status.roles_memory
        try:
            await self._save(self.status)
        except Exception as e:
            if required:
                raise
            self._log.warning("cluster_upgrade_status_not_kept", error=str(e))

    async def _say(self, stage: str, state: str, message: str) -> None:
        self._log.info("cluster_upgrade_stage", stage=stage, state=state, detail=message)
        if self._emit is not None:
            try:
                await self._emit(stage, state, message)
            except Exception as e:  # an Event not written never stops an upgrade
                self._log.warning("cluster_upgrade_emit_failed", stage=stage, error=str(e))

    def _was_cut_in(self, name: str) -> bool:
        """Whether the upgrade resumed was interrupted while `name` ran."""
        before = self._before.halted_at() if self._before is not None else None
        return before is not None and before.name == name and before.state == "interrupted"

    async def _preflight(self) -> tuple[str, str, dict[str, Version]]:
        try:
            running = await self.roles.versions()
        except Exception as e:  # a daemon not answering: its release is unknown, so nothing moves
            unread = f"{type(e).__name__}: {e}"
            if self._was_cut_in(daemons.SLURMCTLD) and self.status.jobs_before:
                # cut between a controller's stop and its verification: none may answer now, and
                # the stage goes on (the target's slurmctld on the state as it is, judged against
                # what was read before the stop); the window was checked before that stage began
                return (
                    "done",
                    (
                        f"resuming the slurmctld stage that was interrupted; a daemon does not answer "
                        f"({unread}): the slurmctld stage starts {self.target}'s controller where none runs"
                    ),
                    {},
                )
            return "refused", f"refused, nothing changed: a daemon's release could not be read: {unread}", {}
        why = refusal(self.target, running, accounting=has_accounting(self.roles))
        if why is not None:
            return "refused", f"refused, nothing changed: {why}", running
        room = await self.roles.room()
        tight = [f"{what} ({need} bytes needed, {free} free)" for what, need, free in room if need > free]
        if tight:
            return "refused", f"refused, nothing changed: no room for {'; '.join(tight)}", running
        seen = ", ".join(f"{d} {v}" for d, v in sorted(running.items()))
        resumed = f"; resumed at the {self.status.resumed_from} stage" if self.status.resumed_from else ""
        return "done", f"target {self.target} within Slurm's window from: {seen}{resumed}", running

    async def _slurmdbd(self, running: dict[str, Version]) -> tuple[str, str, dict[str, Version]]:
        if not has_accounting(self.roles):
            return "skipped", "this cluster runs no slurmdbd (no accounting)", running
        if daemons.SLURMDBD not in running:  # a resumed slurmctld stage whose daemons do not answer
            return "skipped", "slurmdbd was moved before the interruption (its release not read now)", running
        if same_release(running[daemons.SLURMDBD], self.target):
            return "skipped", f"slurmdbd already runs {running[daemons.SLURMDBD]}", running
        self.status.backup = await self.roles.backup_database()
        await self.checkpoint()
        try:
            await self.roles.replace_slurmdbd(self.status.images[daemons.SLURMDBD])
            now = (await self.roles.versions()).get(daemons.SLURMDBD)
        except Exception as e:  # said in the stage's words below
            self._note_death(daemons.SLURMDBD, e)
            return (
                "failed",
                f"the new slurmdbd did not come up ({type(e).__name__}: {e}); not rolled back: its "
                "database may be partly converted, and an older slurmdbd must not run on it. "
                "slurmctld keeps running and queues its records for slurmdbd. Restore the backup "
                f"{self.status.backup} and start the old slurmdbd, or fix the cause and start the new "
                "one (docs/upgrades.md, When slurmdbd fails)",
                running,
            )
        if now is None or not same_release(now, self.target):
            return "failed", f"slurmdbd answers but runs {now}, not {self.target}", running
        return "done", f"slurmdbd {now} on the converted database; backup at {self.status.backup}", running

    async def _slurmctld(self, running: dict[str, Version]) -> tuple[str, str, dict[str, Version]]:
        controllers = self.roles.controllers()
        cut = self._was_cut_in(daemons.SLURMCTLD) and bool(self.status.jobs_before)
        on_target = {
            c for c in controllers if same_release(running.get(f"slurmctld:{c}", NO_RELEASE), self.target)
        }
        if not cut and len(on_target) == len(controllers):
            return "skipped", "every slurmctld already runs the target", running
        old_answering = [c for c in controllers if f"slurmctld:{c}" in running and c not in on_target]
        if cut and not old_answering:
            # cut after the first stop: judged against what it had before, not what it shows now
            # (an old controller still answering is the truth itself, read afresh below)
            jobs_before = dict.fromkeys(self.status.jobs_before, "RUNNING")
            nodes_before = set(self.status.nodes_before)
            queued = ""
        else:
            queued = await self._accounting_taken()
            jobs_before = await self.roles.jobs()
            nodes_before = await self.roles.nodes()
            self.status.jobs_before = sorted(j for j, s in jobs_before.items() if s in LIVE_JOBS)
            self.status.nodes_before = sorted(nodes_before)
            self.status.state_copy = ""  # a copy from a run before this one is not this state
            await self.checkpoint()
        # backups first, the primary last: slurmctld answers throughout until the primary stops
        # (the backups in standby meanwhile), and the state is copied once the primary saved it
        stopped = time.monotonic()
        moved: list[str] = []
        for controller in controllers:
            last = controller == controllers[-1]
            moved.append(controller)
            try:
                if f"slurmctld:{controller}" not in running:
                    # resumed, none answering: the state is the old one's as it stopped, or the new
                    # one's; the target's controller reads either
                    if last and not self.status.state_copy:
                        self.status.state_copy = await self.roles.copy_state()
                        await self.checkpoint()
                    await self.roles.start_slurmctld(controller, self.status.images[daemons.SLURMCTLD])
                elif controller not in on_target:
                    if last:
                        stopped = time.monotonic()
                    await self.roles.stop_slurmctld(controller)
                    if last:
                        await self.checkpoint()  # what the roles saw before the stop, kept
                        self.status.state_copy = await self.roles.copy_state()
                        await self.checkpoint()
                    await self.roles.start_slurmctld(controller, self.status.images[daemons.SLURMCTLD])
                # else: resumed on a controller already started on the target: judged only
                await self._verify_controller(controller, jobs_before, nodes_before)
            except Exception as e:  # the rollback says what happened
                state, detail = await self._roll_back(moved, e, jobs_before, nodes_before, stopped)
                return state, detail, running
        self.status.slurmctld_unanswered_seconds = round(time.monotonic() - stopped, 3)
        several = f" ({len(controllers)} controllers, one at a time: {', '.join(controllers)})"
        return (
            "done",
            f"slurmctld {self.target} on the same state{several if len(controllers) > 1 else ''}: "
            f"{len(jobs_before)} jobs and {len(nodes_before)} nodes read back; state copy at "
            f"{self.status.state_copy}{queued}",
            running,
        )

    async def _accounting_taken(self) -> str:
        if not has_accounting(self.roles):
            return ""

        async def say(message: str) -> None:
            await self._say(daemons.SLURMCTLD, "running", message)

        return await accounting_taken(
            self.roles, self._accounting_wait, self._verify_interval, say, self._log
        )

    async def _roll_back(
        self,
        moved: list[str],
        cause: Exception,
        jobs_before: dict[int, str],
        nodes_before: set[str],
        stopped: float,
    ) -> tuple[str, str]:
        """Put every controller moved (the last one failed) back on its old release, and the state
        on the saved copy where the one that failed had stopped the primary; the stage's state and
        detail after it."""
        failed, others = moved[-1], moved[:-1]
        primary = failed == self.roles.controllers()[-1]
        why = f"the new slurmctld on {failed} failed: {cause}"
        back = "the saved state" if primary else "the old release (the primary and its state untouched)"
        self._note_death(daemons.SLURMCTLD, cause)
        await self._say(daemons.SLURMCTLD, ROLLING_BACK, f"{why}; rolling back to {back}")
        try:
            if primary:
                # the moved backups stopped first: none may take control on the state being restored
                for other in others:
                    await self.roles.stop_slurmctld(other)
                # no copy (the stop or the copy failed): no new controller ran, the state is the old one's
                await self.roles.restore_slurmctld(failed, self.status.state_copy)
                await self._verify_controller(failed, jobs_before, nodes_before, expect_target=False)
            else:
                await self.roles.restore_slurmctld(failed, "")
            for other in others:
                await self.roles.restore_slurmctld(other, "")
            for controller in moved:
                await self._verify_controller(controller, jobs_before, nodes_before, expect_target=False)
        except Exception as e:  # said in full: the operator must act
            return "failed", (
                f"{why}; the rollback failed too ({type(e).__name__}: {e}): the state copy is at "
                f"{self.status.state_copy or 'none (the primary was not stopped)'} (docs/upgrades.md, "
                "When slurmctld fails)"
            )
        if primary:
            self.status.slurmctld_unanswered_seconds = round(time.monotonic() - stopped, 3)
        where = ("on the saved state " if self.status.state_copy else "on its own state ") if primary else ""
        every = f" ({', '.join(moved)})" if len(moved) > 1 else ""
        return "rolled_back", (
            f"{why}; rolled back: the old slurmctld{every} runs {where}with all "
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
        await controller_verified(
            self.roles,
            controller,
            jobs_before,
            nodes_before,
            target=self.target,
            expect_target=expect_target,
            timeout_seconds=self._verify_timeout,
            interval_seconds=self._verify_interval,
        )

    async def _workers(self, running: dict[str, Version]) -> tuple[str, str, dict[str, Version]]:
        if not any(d.startswith("slurmd:") for d in running):  # resumed where no release was read
            running = await self.roles.versions()
        old = [d for d, v in running.items() if d.startswith("slurmd:") and not same_release(v, self.target)]
        if not old:
            return "skipped", "every slurmd already runs the target", running
        await self.roles.roll_workers(self.status.images[daemons.SLURMD], self.target)
        now = await self.roles.versions()
        behind = sorted(
            d for d, v in now.items() if d.startswith("slurmd:") and not same_release(v, self.target)
        )
        if behind:
            return "failed", f"the roll ended with {', '.join(behind)} not on {self.target}", running
        return "done", f"{len(old)} workers moved to {self.target}", running


def exited(failure: BaseException | None) -> DaemonExited | None:
    """The daemon's death behind `failure` (itself, or what caused it, as the workers' roll wraps
    its worker's), if any."""
    seen: set[int] = set()
    while failure is not None and id(failure) not in seen:
        if isinstance(failure, DaemonExited):
            return failure
        seen.add(id(failure))
        failure = failure.__cause__ or failure.__context__
    return None
