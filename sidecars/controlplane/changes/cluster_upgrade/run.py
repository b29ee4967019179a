"""The control plane's one whole-cluster upgrade at a time: started from the API, run as a named
task, paused and resumed between stages, reported per stage; each stage's start, end, rollback and
pause is a log line, metrics, a wake-up of the page and an Event (`events`: the Lease holder's).

Its status is kept in `store` at each stage's start and end and at each rollback point (the backup,
the state copy): a control plane restarted, or a new Lease holder, reads it back, reports an upgrade
it finds cut under way as `interrupted` at that stage, and starts no other upgrade until the
operator starts that one again (with the same target: it goes on from where it stopped).

The roles (where the daemons run) are handed in: the dev cluster's release swap in the demo and the
tests. Without them the start is refused with `why_unavailable`, one line that names what is missing
(in Kubernetes: the settings that name slurmdbd's and slurmctld's workloads, cluster_roles/kube.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from sidecars.controlplane.changes.budget import UpgradeError
from sidecars.controlplane.changes.cluster_roles.roles import ClusterRoles
from sidecars.controlplane.changes.cluster_upgrade.events import StageEvents
from sidecars.controlplane.changes.cluster_upgrade.stages import ClusterUpgrade
from sidecars.controlplane.changes.cluster_upgrade.status import STAGES, STATES, ClusterUpgradeStatus
from sidecars.controlplane.changes.cluster_upgrade.store import StatusStore
from sidecars.controlplane.fleet.metrics import Declare
from sidecars.slurm import Version, daemons

log = structlog.get_logger(__name__)

ROLES = daemons.UPGRADE_ORDER


class ClusterUpgradeMetrics:
    """Each stage's state (its index in STATES) and its duration in seconds, by stage."""

    def __init__(self, registry: CollectorRegistry) -> None:
        m = Declare(registry, "slurm_sidecars_cluster_upgrade_")
        self.stage_state = m.gauge(
            "stage_state",
            "each stage's state of the last whole-cluster upgrade: "
            + ", ".join(f"{i} {s}" for i, s in enumerate(STATES)),
            "stage",
        )
        self.stage_seconds = m.gauge(
            "stage_seconds", "how long each stage of the last whole-cluster upgrade ran, in seconds", "stage"
        )
        self.unanswered_seconds = m.gauge(
            "slurmctld_unanswered_seconds",
            "how long slurmctld did not answer during the last upgrade's slurmctld stage, in seconds",
        )


@dataclass(eq=False)
class ClusterUpgrades:
    """At most one upgrade runs; the last one is kept (in memory, and in `store` when there is one)
    for `report()` until the next starts. `roles` and `store` may be handed in after construction
    (the demo and the tests: the dev cluster's), before the control plane serves."""

    roles: ClusterRoles | None
    why_unavailable: str
    metrics: ClusterUpgradeMetrics
    _: KW_ONLY
    events: StageEvents | None = None
    store: StatusStore | None = None
    verify_timeout_seconds: float = 60.0
    current: ClusterUpgrade | None = field(default=None, init=False)
    # the store's, while no upgrade ran here
    last: ClusterUpgradeStatus | None = field(default=None, init=False)
    # why the store's status could not be read (none starts meanwhile)
    store_error: str = field(default="", init=False)
    # after each stage's start and end (the page)
    on_change: Callable[[], None] | None = field(default=None, init=False)
    _task: asyncio.Task[str] | None = field(default=None, init=False)
    _loaded: bool = field(default=False, init=False)
    _loading: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    # ------------------------------------------------------------------ the store
    def forget(self) -> None:
        """What is held may be stale (this replica just became the Lease holder): read it again."""
        if not self.running:
            self._loaded = False

    async def ensure_loaded(self) -> None:
        """Read the kept status once (again after `forget`); a stage found `running` with no task
        here was cut by the control plane's end: it is `interrupted`, kept so, and said."""
        async with self._loading:  # the upgrade loop and the API may ask at once: one read, one Event
            if self._loaded or self.store is None or self.running:
                return
            try:
                data = await self.store.load()
                found = None if data is None else ClusterUpgradeStatus.from_data(data)
            except ValueError as e:  # not a status: reported, and nothing starts over it
                self.store_error = f"the kept status in {self.store.where} cannot be read: {e}"
                log.error("cluster_upgrade_status_unreadable", where=self.store.where, error=str(e))
                self._loaded = True
                return
            except Exception as e:  # the API after the edge's retries: read again at the next ask
                self.store_error = f"the kept status in {self.store.where} could not be read now: {e}"
                log.warning("cluster_upgrade_status_unread", where=self.store.where, error=str(e))
                return
            self.store_error = ""
            self.current, self.last, self._loaded = None, found, True
            cut = found.interrupted() if found is not None else None
            if found is not None and cut is not None:
                log.warning("cluster_upgrade_interrupted", target=found.target, stage=cut.name)
                try:
                    await self.store.save(found.data())
                except Exception as e:  # said again by the next holder, who finds it `running` too
                    log.warning("cluster_upgrade_status_not_kept", error=str(e))
                self._show(found)
                await self._say(found.target, cut.name, cut.state, cut.detail)
            elif found is not None:
                self._show(found)

    def lost_lease(self) -> None:
        """Another replica may lead now: the upgrade under way stops where it is (as if this control
        plane had ended), and the new holder finds it `interrupted` there. Only the holder acts."""
        if self._task is not None and not self._task.done():
            log.warning(
                "cluster_upgrade_stopped_lease_lost", target=str(self.current.target if self.current else "")
            )
            self._task.cancel()
        self._loaded = False

    async def _save(self, status: ClusterUpgradeStatus) -> None:
        if self.store is not None:
            await self.store.save(status.data())

    # ------------------------------------------------------------------ start
    def start(self, target: Version, images: Mapping[str, str]) -> ClusterUpgrade:
        """Start the upgrade in its own task; 409 while one runs or where there are no roles, or
        while a kept upgrade to another target is unfinished (one to the same target goes on)."""
        if self.roles is None:
            raise UpgradeError(409, self.why_unavailable)
        if self.running:
            assert self.current is not None
            raise UpgradeError(
                409,
                f"an upgrade to {self.current.target} runs ({self.current.status.state}): wait for its end",
            )
        if self.store_error:
            then = "try again" if self._loaded is False else "see what it says and remove it"
            raise UpgradeError(409, f"{self.store_error}: {then} before an upgrade starts")
        missing = [r for r in ROLES if not images.get(r)]
        if missing:
            raise UpgradeError(400, f"no image (or release) given for {', '.join(missing)}")
        before = self.current.status if self.current is not None else self.last
        resume = None
        if before is not None and before.state in ("interrupted", "paused", "running"):
            if before.target != str(target):
                halted = before.halted_at()
                where = f" at its {halted.name} stage" if halted else ""
                raise UpgradeError(
                    409,
                    f"the upgrade to {before.target} was {before.state}{where}: start it again with "
                    f"--slurm-version {before.target} to go on (its backup {before.backup or 'none'}, "
                    f"its state copy {before.state_copy or 'none'})",
                )
            resume = before
        elif before is not None and before.target == str(target) and before.state != "complete":
            resume = before  # halted (failed, rolled back): started again, its copies kept
        up = ClusterUpgrade(
            self.roles,
            target,
            images,
            emit=self._said,
            save=self._save,
            resume=resume,
            verify_timeout_seconds=self.verify_timeout_seconds,
        )
        for stage in STAGES:
            self.metrics.stage_state.labels(stage).set(0)
            self.metrics.stage_seconds.labels(stage).set(0)
        self.current, self.last = up, None
        self._task = asyncio.create_task(up.run(), name=f"cluster-upgrade-{target}")
        self._task.add_done_callback(self._ended)
        return up

    def _ended(self, task: asyncio.Task[str]) -> None:
        # the stages catch their own failures: an exception here is a defect, said loudly
        if not task.cancelled() and task.exception() is not None:
            log.error("cluster_upgrade_task_failed", error=repr(task.exception()))

    def _show(self, status: ClusterUpgradeStatus) -> None:
        """The metrics of a status read back (a new holder's report is the old one's)."""
        for stage in status.stages:
            self.metrics.stage_state.labels(stage.name).set(STATES.index(stage.state))
            self.metrics.stage_seconds.labels(stage.name).set(stage.seconds or 0)
        if status.slurmctld_unanswered_seconds is not None:
            self.metrics.unanswered_seconds.set(status.slurmctld_unanswered_seconds)

    async def _said(self, stage: str, state: str, message: str) -> None:
        if self.current is None:
            return
        status = self.current.status
        self.metrics.stage_state.labels(stage).set(STATES.index(status.stage(stage).state))
        done = status.stage(stage)
        if done.seconds is not None and state != "running":
            self.metrics.stage_seconds.labels(stage).set(done.seconds)
        if status.slurmctld_unanswered_seconds is not None:
            self.metrics.unanswered_seconds.set(status.slurmctld_unanswered_seconds)
        await self._say(status.target, stage, state, message)

    async def _say(self, target: str, stage: str, state: str, message: str) -> None:
        if self.on_change is not None:
            self.on_change()
        if self.events is not None:
            await self.events.emit(target, stage, state, message)

    # ------------------------------------------------------------------ pause, report, close
    def set_paused(self, paused: bool) -> ClusterUpgrade:
        """Pause (before the next stage) or resume the upgrade under way; 404 when none runs."""
        if self.current is None or not self.running:
            raise UpgradeError(404, "no whole-cluster upgrade runs")
        if paused:
            self.current.pause()
        else:
            self.current.resume()
        return self.current

    def report(self) -> dict[str, Any] | None:
        status = self.current.status if self.current is not None else self.last
        return None if status is None else status.report()

    async def close(self) -> None:
        """Stop the task at shutdown (a stage under way is cut: the kept status says where it was,
        and the next control plane reports it `interrupted` there)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
