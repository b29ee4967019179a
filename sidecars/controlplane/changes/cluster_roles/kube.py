"""Kubernetes as a whole-cluster upgrade's roles (`ClusterRoles`): slurmdbd's Deployment or
StatefulSet and slurmctld's StatefulSet, named by settings, changed through the API; the releases,
jobs and nodes read from Slurm; the workers moved by the budgeted roll (upgrade.py).

- slurmdbd: the operator's backup Job (its template in a ConfigMap), then the container's image
  patched and the rollout waited for (observedGeneration, updated, ready and available replicas),
  then slurmdbd answering.
- slurmctld: scaled to 0 (slurmctld saves its state at SIGTERM) and its pods waited gone; the
  StateSaveLocation copied on its own volume by a Job of ours (`slurm-sidecars state copy`); the
  image patched and the replicas it had given back, its pods Ready and slurmctld answering. The
  rollback: scaled to 0, `state restore` from the copy, the old image back.

Every wait is bounded. A pod whose container ended (terminated, or restarted after a termination:
seen at the first poll, before any CrashLoopBackOff) raises PodDied with its termination message's
fatal line and the time it finished; one in CrashLoopBackOff, or not Ready in time, raises
StageFailed with the kubelet's words for it; either way the stage machine rolls back. A Job that
outlives its bound is deleted before the stage fails: a restore that ran late would write over a
state in use.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from sidecars.controlplane.changes.cluster_roles.kube_jobs import (
    COPIES,
    TEMPLATE_KEY,
    StateVolume,
    TemplateError,
    backup_job,
    backup_location,
    state_job,
    state_volume,
)
from sidecars.controlplane.changes.cluster_roles.roles import StageFailed
from sidecars.controlplane.settings import ClusterUpgradeSettings
from sidecars.kube import KubeClient, KubeWorkloads, PodHealth, Workload
from sidecars.slurm import SlurmClient, Version, daemons, running_releases, slurmdbd_version
from sidecars.slurm.lastwords import DaemonExited, last_words

log = structlog.get_logger(__name__)


# a node in these runs no slurmd to ask: its release is whatever its pod starts with next
OFF_STATES = frozenset({"DOWN", "FUTURE"})
OFF_FLAGS = frozenset({"POWERED_DOWN", "POWERING_DOWN"})


class PodDied(StageFailed, DaemonExited):
    """A container of the workload just changed ended: the stage acts now, in its own words."""

    def __init__(self, daemon: str, words: str, died_at: float, how: str) -> None:
        DaemonExited.__init__(self, daemon, words, died_at, how)


def _died(kind: str, name: str, pod: PodHealth) -> PodDied:
    """The death a pod's status shows: its termination message's last fatal (or errors), the time
    the kubelet says it finished (else now)."""
    ended = pod.ended
    assert ended is not None
    words = last_words(ended.message).line or ended.reason
    code = f", exit {ended.exit_code}" if ended.exit_code is not None else ""
    again = f", restarted {ended.restarts} times" if ended.restarts else ""
    how = f"of {kind} {name} ended ({ended.reason}{code}{again})"
    return PodDied(
        f"container {ended.container} of pod {pod.name}", words, ended.finished_at or time.time(), how
    )


class PreflightError(Exception):
    """What the workloads' settings name is not there, or not usable; nothing was changed."""


@dataclass(frozen=True)
class KubeRoleNames:
    """What a whole-cluster upgrade changes: the control plane's --upgrade-* flags (their group, handed
    whole, its slurmdbd workload named), in its namespace."""

    namespace: str
    upgrade: ClusterUpgradeSettings
    own_pod: str = ""  # the control plane's pod: never one of slurmctld's (it would stop itself)
    poll_interval_seconds: float = 1.0

    def __post_init__(self) -> None:
        if self.upgrade.slurmdbd_workload is None:
            raise ValueError(
                "a whole-cluster upgrade needs slurmdbd's workload (--upgrade-slurmdbd-workload)"
            )

    @property
    def slurmdbd_kind(self) -> str:  # "Deployment" or "StatefulSet"
        return self._slurmdbd[0]

    @property
    def slurmdbd_name(self) -> str:
        return self._slurmdbd[1]

    @property
    def _slurmdbd(self) -> tuple[str, str]:
        workload = self.upgrade.slurmdbd_workload
        assert workload is not None  # __post_init__
        return workload


WorkerRoll = Callable[[str, Version], Awaitable[None]]


class KubeClusterRoles:
    def __init__(
        self,
        names: KubeRoleNames,
        kube: KubeClient,
        slurm: Callable[[], SlurmClient],
        roll_workers: WorkerRoll,
    ) -> None:
        self.names = names
        self.workloads = KubeWorkloads(kube)
        self._kube = kube
        self._slurm = slurm
        self._roll = roll_workers
        self._before: dict[str, Any] = {}  # what slurmctld ran before the upgrade: image, replicas
        self._state: StateVolume | None = None
        self._location = ""  # slurmctld's StateSaveLocation, as it said it
        self._copy_path = ""  # the state copy's path on its volume, once made
        self._log = log.bind(namespace=names.namespace)

    # ------------------------------------------------------------------ reads, from Slurm
    async def versions(self) -> dict[str, Version]:
        """As Slurm tells them; a node that should run a slurmd and has told slurmctld no release
        (not registered with it since its start) raises: a release unknown is never taken as moved."""
        client = self._slurm()
        found = await running_releases(client, self.names.upgrade.slurmctld_statefulset)
        silent = [
            n.name
            for n in await client.nodes()
            if f"{daemons.SLURMD}:{n.name}" not in found
            and n.state.base not in OFF_STATES
            and not OFF_FLAGS & n.state.flags
        ]
        if silent:
            raise StageFailed(f"slurmd on {', '.join(silent[:10])} has told slurmctld no release yet")
        return found

    async def jobs(self) -> dict[int, str]:
        return {j.job_id: j.state for j in await self._slurm().jobs()}

    async def nodes(self) -> set[str]:
        return {n.name for n in await self._slurm().nodes()}

    def controllers(self) -> list[str]:
        return [self.names.upgrade.slurmctld_statefulset]

    async def room(self) -> list[tuple[str, int, int]]:
        """Checks what the stages will act on, before anything changes (a PreflightError fails the
        preflight): both workloads and their containers, one slurmctld replica, the backup template,
        the StateSaveLocation's volume. The room itself is judged where the bytes are: the state
        Job refuses to copy without room on its volume (nothing is changed by then but slurmctld's
        stop, undone at once), and the backup Job is the platform's own."""
        n = self.names
        # one roles object serves every upgrade of this control plane: the preflight starts afresh
        self._before.clear()
        self._copy_path, self._location, self._state = "", "", None
        if not n.own_pod:
            raise PreflightError(
                "this control plane does not know its own pod (--pod-name, POD_NAME): it cannot tell "
                "that stopping slurmctld would not stop it too"
            )
        await self._workload(n.slurmdbd_kind, n.slurmdbd_name, n.upgrade.slurmdbd_container)
        sts = await self._workload(
            "StatefulSet", n.upgrade.slurmctld_statefulset, n.upgrade.slurmctld_container
        )
        if re.fullmatch(rf"{re.escape(sts.name)}-\d+", n.own_pod):
            raise PreflightError(
                f"this control plane runs in {n.own_pod}, a pod of StatefulSet {sts.name}: stopping "
                "slurmctld would stop this upgrade with it; run the control plane in a pod of its own "
                "(docs/upgrades.md)"
            )
        if sts.replicas > 1:
            raise PreflightError(
                f"StatefulSet {sts.name} has {sts.replicas} replicas (HA): this upgrade moves one slurmctld"
            )
        if not n.upgrade.without_database_backup:
            await self._backup_template("preflight")
        self._state = await self._state_volume(sts)
        return []

    async def _workload(self, kind: str, name: str, container: str) -> Workload:
        found = await self.workloads.get(kind, self.names.namespace, name)
        if found is None:
            raise PreflightError(f"{kind} {self.names.namespace}/{name} is not there")
        if found.image(container) is None:
            raise PreflightError(f"{kind} {name} has no container {container}")
        if found.owner:
            # its controller (e.g. Slinky's operator) puts its own spec back, at any instant
            raise PreflightError(
                f"{kind} {name} is managed by {found.owner}, which would undo our image and scale "
                "changes: move it through its owner instead (docs/upgrades.md)"
            )
        return found

    async def _state_volume(self, sts: Workload) -> StateVolume:
        # remembered: a control plane that took over while slurmctld is down cannot ask it
        location = self._location or (await self._slurm().show_config()).get("StateSaveLocation", "")
        if not location:
            raise PreflightError("slurmctld did not say its StateSaveLocation")
        try:
            found = state_volume(sts.name, sts.spec, self.names.upgrade.slurmctld_container, location)
        except ValueError as e:
            raise PreflightError(str(e)) from None
        self._location = location
        return found

    async def _backup_template(self, stamp: str) -> dict[str, Any]:
        cm = self.names.upgrade.backup_job_configmap
        data = await self._kube.get_config_map(self.names.namespace, cm)
        if data is None or TEMPLATE_KEY not in data:
            raise PreflightError(
                f"ConfigMap {cm} with the backup Job's template (key {TEMPLATE_KEY}) is not there"
            )
        try:
            return backup_job(data[TEMPLATE_KEY], cm, stamp)
        except TemplateError as e:
            raise PreflightError(str(e)) from None

    # ------------------------------------------------------------------ slurmdbd
    async def backup_database(self) -> str:
        if self.names.upgrade.without_database_backup:
            return "none: the operator chose no database backup (--upgrade-without-database-backup)"
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        job = await self._backup_template(stamp)
        name = await self._run_job(job, "database backup")
        where = backup_location(job, stamp)
        return (
            f"{where} (Job {name})"
            if where
            else f"where Job {name} of ConfigMap {self.names.upgrade.backup_job_configmap} wrote it"
        )

    async def replace_slurmdbd(self, image: str) -> None:
        n = self.names
        await self.workloads.set_image(
            n.slurmdbd_kind, n.namespace, n.slurmdbd_name, n.upgrade.slurmdbd_container, image
        )
        await self._rolled_out(n.slurmdbd_kind, n.slurmdbd_name, n.upgrade.slurmdbd_container)
        await self._answering(daemons.SLURMDBD, lambda: slurmdbd_version(self._slurm()))

    # ------------------------------------------------------------------ slurmctld
    async def stop_slurmctld(self, controller: str) -> None:
        n = self.names
        sts = await self._workload("StatefulSet", controller, n.upgrade.slurmctld_container)
        if self._state is None:
            self._state = await self._state_volume(sts)
        self._before.setdefault("image", sts.image(n.upgrade.slurmctld_container))
        self._before.setdefault("replicas", max(sts.replicas, 1))
        await self._scaled_to_zero(controller)

    async def _scaled_to_zero(self, controller: str) -> None:
        await self.workloads.scale_stateful_set(self.names.namespace, controller, 0)
        sts = await self._workload("StatefulSet", controller, self.names.upgrade.slurmctld_container)

        async def gone() -> bool:
            return not await self.workloads.pods(self.names.namespace, sts.selector)

        await self._until(
            gone, f"the pods of StatefulSet {controller} gone", self.names.upgrade.rollout_timeout_seconds
        )

    async def accounting_queue(self) -> int:
        return await self._slurm().accounting_queue()

    def memory(self) -> dict[str, str]:
        """slurmctld's image and replicas before the upgrade, and the state copy: what a rollback
        needs, kept with the upgrade's status for a control plane that takes over mid-stage."""
        out = {"copy_path": self._copy_path} if self._copy_path else {}
        out |= {"state_location": self._location} if self._location else {}
        out |= {f"slurmctld_{k}": str(v) for k, v in self._before.items()}
        return out

    def recall(self, memory: dict[str, str]) -> None:
        """Take back what `memory` kept; anything not of its exact shape is left out (the kept
        status is data in a ConfigMap: a copy path is ours only, an image one reference)."""
        image = memory.get("slurmctld_image", "")
        if image and len(image) <= 512 and not any(c.isspace() for c in image):
            self._before["image"] = image
        if memory.get("slurmctld_replicas", "").isdigit():
            self._before["replicas"] = max(int(memory["slurmctld_replicas"]), 1)
        if re.fullmatch(rf"{re.escape(COPIES)}/state-\d{{8}}T\d{{6}}", memory.get("copy_path", "")):
            self._copy_path = memory["copy_path"]
        location = memory.get("state_location", "")
        if location.startswith("/") and ".." not in location.split("/"):
            self._location = location

    async def _old_image(self) -> str:
        """The image slurmctld ran before the upgrade. Not remembered (a control plane that took
        over before its first checkpoint after the stop): the StatefulSet's own, which is still
        the old one there, since the new image is patched only after the copy was kept."""
        if "image" not in self._before:
            sts = await self._workload(
                "StatefulSet",
                self.names.upgrade.slurmctld_statefulset,
                self.names.upgrade.slurmctld_container,
            )
            self._before["image"] = sts.image(self.names.upgrade.slurmctld_container)
        return str(self._before["image"])

    async def copy_state(self) -> str:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        copy_path = f"{COPIES}/state-{stamp}"
        # a failure raises: the machine's rollback starts the old controller on its own state
        # (restore_slurmctld with no copy), nothing changed but the stop
        state = await self._state_job("copy", copy_path)
        self._copy_path = copy_path
        return f"{copy_path} on {state.describe}"

    async def start_slurmctld(self, controller: str, image: str) -> None:
        await self._start(controller, image)

    async def restore_slurmctld(self, controller: str, saved: str) -> None:
        await self._scaled_to_zero(controller)
        if saved:  # "": no copy was made, no new controller ran: the state is the old one's as it is
            if not self._copy_path:
                raise StageFailed(f"the state copy of this upgrade is not known here ({saved})")
            await self._state_job("restore", self._copy_path)
        await self._start(controller, await self._old_image())

    async def _state_job(self, action: str, copy_path: str) -> StateVolume:
        n = self.names
        sts = await self._workload(
            "StatefulSet", n.upgrade.slurmctld_statefulset, n.upgrade.slurmctld_container
        )
        if self._state is None:  # read at the preflight or the stop; else from what was remembered
            try:
                self._state = await self._state_volume(sts)
            except Exception as e:
                raise StageFailed(f"slurmctld's StateSaveLocation is not known here: {e}") from e
        job = state_job(
            action,
            sts.name,
            sts.spec,
            self._state,
            copy_path,
            n.upgrade.state_image,
            n.upgrade.slurmctld_container,
        )
        await self._run_job(job, f"state {action}")
        return self._state

    async def _start(self, controller: str, image: str) -> None:
        n = self.names
        await self.workloads.set_image(
            "StatefulSet", n.namespace, controller, n.upgrade.slurmctld_container, image
        )
        await self.workloads.scale_stateful_set(n.namespace, controller, int(self._before.get("replicas", 1)))
        await self._rolled_out("StatefulSet", controller, n.upgrade.slurmctld_container)
        await self._answering(daemons.SLURMCTLD, self._slurm().show_config)

    # ------------------------------------------------------------------ the workers
    async def roll_workers(self, image: str, version: Version) -> None:
        await self._roll(image, version)

    # ------------------------------------------------------------------ waits
    async def _until(self, check: Callable[[], Awaitable[bool]], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not await check():
            if time.monotonic() >= deadline:
                raise StageFailed(f"gave up after {timeout:g}s waiting for {what}")
            await asyncio.sleep(self.names.poll_interval_seconds)

    async def _rolled_out(self, kind: str, name: str, container: str) -> None:
        """Until the workload's rollout is done; its pods' own words when one crash-loops or when
        the bound passes."""
        n = self.names
        deadline = time.monotonic() + n.upgrade.rollout_timeout_seconds
        while True:
            w = await self._workload(kind, name, container)
            if w.rolled_out():
                return
            pods = await self.workloads.pods(n.namespace, w.selector)
            died = next((p for p in pods if p.ended is not None), None)
            if died is not None:
                raise _died(kind, name, died)
            looping = [p for p in pods if p.crash_looping]
            if looping or time.monotonic() >= deadline:
                said = "; ".join(
                    f"pod {p.name}: {p.words or p.phase or 'no status'}" for p in looping or pods
                )
                why = (
                    "crash-looping"
                    if looping
                    else f"not rolled out within {n.upgrade.rollout_timeout_seconds:g}s"
                )
                counts = f"{w.ready}/{w.replicas} ready, {w.updated} updated"
                raise StageFailed(f"{kind} {name} {why} ({counts}): {said or 'no pod'}")
            await asyncio.sleep(n.poll_interval_seconds)

    async def _answering(self, daemon: str, ask: Callable[[], Awaitable[object]]) -> None:
        deadline = time.monotonic() + self.names.upgrade.rollout_timeout_seconds
        while True:
            try:
                await ask()
                return
            except Exception as e:  # not answering yet: asked again until the bound
                if time.monotonic() >= deadline:
                    raise StageFailed(f"{daemon} runs but did not answer within the bound: {e}") from None
            await asyncio.sleep(self.names.poll_interval_seconds)

    async def _run_job(self, job: dict[str, Any], what: str) -> str:
        """Create the Job and wait for its end; StageFailed with its words (and its pods') when it
        failed, or when it outlived the bound (it is deleted then)."""
        n = self.names
        # Kubernetes itself ends the Job at our bound, whatever happens to this control plane: a
        # copy or restore still writing once a rollback or a new holder acts would be the worst case
        job = {
            **job,
            "spec": {**job["spec"], "activeDeadlineSeconds": max(int(n.upgrade.job_timeout_seconds), 1)},
        }
        name = await self.workloads.create_job(n.namespace, job)
        self._log.info("cluster_upgrade_job_started", job=name, what=what)
        deadline = time.monotonic() + n.upgrade.job_timeout_seconds
        while True:
            state = await self.workloads.job(n.namespace, name)
            if state is None:
                raise StageFailed(f"the {what} Job {name} was deleted before it ended")
            if state.finished == "Complete":
                self._log.info("cluster_upgrade_job_done", job=name, what=what)
                return name
            if state.finished or time.monotonic() >= deadline:
                pods = await self.workloads.pods(n.namespace, {"job-name": name})
                said = "; ".join(f"pod {p.name}: {p.words}" for p in pods if p.words)
                if not state.finished:
                    await self.workloads.delete_job(n.namespace, name)
                    why = f"did not end within {n.upgrade.job_timeout_seconds:g}s (deleted)"
                else:
                    why = f"failed ({state.words})"
                self._log.warning("cluster_upgrade_job_failed", job=name, what=what)
                raise StageFailed(f"the {what} Job {name} {why}: {said or 'its pods said nothing'}")
            await asyncio.sleep(n.poll_interval_seconds)


def unavailable(missing: list[str]) -> str:
    """The one line a start is refused with when the settings do not name what to change."""
    return (
        f"a whole-cluster upgrade cannot run here: {', '.join(missing)} not set (docs/upgrades.md, "
        "In Kubernetes); roll the workers alone with `upgrade start --revision`"
    )
