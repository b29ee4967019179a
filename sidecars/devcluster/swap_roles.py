"""The dev cluster as a whole-cluster upgrade's roles: each stage's action is a release swap of
`swap.py` (an "image" is a release's name: "chroot" for 24.11, "sid" for 26.05); with several
controllers (`swap_ha.py`) each controller is one role of its own, moved on its own.

It has the shape of the control plane's `ClusterRoles` (sidecars/controlplane/changes/
cluster_roles/roles.py) without importing it: the dev cluster is dev tooling beside the roles, and the
tests, the demo and the U1 benchmark hand it to the stage machine.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict
from pathlib import Path

import structlog

from sidecars.devcluster.base import ClusterError
from sidecars.devcluster.release import Release
from sidecars.devcluster.statecopy import StateMirror
from sidecars.devcluster.swap import SwappableCluster
from sidecars.devcluster.swap_ha import SwappableControllers
from sidecars.protocol import drains
from sidecars.runtime import process
from sidecars.slurm import Reason, Version, running_releases

log = structlog.get_logger(__name__)

LIVE_JOB_STATES = {"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING"}


def _size_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += (Path(root) / name).lstat().st_size
            except OSError:
                continue  # gone while walked
    return total


class DevClusterRoles:
    """A `SwappableCluster`'s daemons as an upgrade's roles. Backups and state copies go to
    DIR/upgrade (removed with the cluster)."""

    def __init__(
        self,
        cluster: SwappableCluster,
        releases: Mapping[str, Release],
        *,
        budget_workers: int = 1,
        worker_timeout_seconds: float = 60.0,
    ) -> None:
        if budget_workers < 1:
            raise ValueError("a budget of 0 workers would never move one")
        self.cluster = cluster
        self.releases = dict(releases)
        self.budget_workers = budget_workers
        self.worker_timeout_seconds = worker_timeout_seconds
        self.backup_dir = cluster.dir / "upgrade"
        self.accounting = cluster.database is not None  # else no slurmdbd: its stage is skipped
        if cluster.ha and not isinstance(cluster, SwappableControllers):
            raise ClusterError("several controllers move one at a time only in a SwappableControllers")
        self._before: dict[str, Release] = {}  # what a role ran before the upgrade moved it
        self._precopy: StateMirror | None = None  # the state copied while slurmctld still ran

    def _release(self, image: str) -> Release:
        try:
            return self.releases[image]
        except KeyError:
            raise ClusterError(f"no release named {image!r} (known: {', '.join(self.releases)})") from None

    def _stamp(self) -> str:
        self.backup_dir.mkdir(mode=0o700, exist_ok=True)
        return time.strftime("%Y%m%dT%H%M%S", time.gmtime())

    # ------------------------------------------------------------------ reads
    async def versions(self) -> dict[str, Version]:
        client = self.cluster.client(timeout=10.0)
        found = await running_releases(client, self.cluster.host, accounting=self.accounting)
        if isinstance(self.cluster, SwappableControllers):
            # the one in control answered above; each running controller's own binary says its release
            found = {d: v for d, v in found.items() if not d.startswith("slurmctld:")}
            for c in self.cluster.controllers:
                if self.cluster.controller_pid(c.name) is not None:
                    found[f"slurmctld:{c.name}"] = Version.parse(
                        self.cluster.controller_release(c.name).version
                    )
        for name in self.cluster.node_names:
            # a running slurmd's own binary, as a worker agent reports it (`slurmd -V`): a node
            # record has no release until its slurmd registered with this controller
            if self.cluster.hostpid(f"slurmd-{name}") is not None:
                found[f"slurmd:{name}"] = Version.parse(self.cluster.release_of(f"slurmd-{name}").version)
        return found

    async def jobs(self) -> dict[int, str]:
        return {j.job_id: j.state for j in await self.cluster.client(timeout=10.0).jobs()}

    async def nodes(self) -> set[str]:
        return {n.name for n in await self.cluster.client(timeout=10.0).nodes()}

    def controllers(self) -> list[str]:
        if self.cluster.ha:  # backups first, the configured primary last
            names = [c.name for c in self.cluster.controllers]
            return [*names[1:], names[0]]
        return [self.cluster.host]

    def _ha(self) -> SwappableControllers | None:
        return self.cluster if isinstance(self.cluster, SwappableControllers) else None

    async def accounting_queue(self) -> int:
        return await self.cluster.client(timeout=10.0).accounting_queue()

    async def room(self) -> list[tuple[str, int, int]]:
        free = shutil.disk_usage(self.cluster.dir).free
        db = self.cluster.database
        database = await asyncio.to_thread(_size_bytes, db.dir / "data") if db else 0
        state = await asyncio.to_thread(_size_bytes, self.cluster.dir / "state")
        # both land on the same file system: each needs room with the other taken
        return [("the database backup", database, free - state), ("the state copy", state, free - database)]

    # ------------------------------------------------------------------ slurmdbd
    async def backup_database(self) -> str:
        db = self.cluster.database
        if db is None:
            raise ClusterError("this cluster has no accounting database")
        path = self.backup_dir / f"{db.name}-{self._stamp()}.sql"
        done = await process.run(
            [
                "mariadb-dump",
                "--no-defaults",
                f"--socket={db.socket}",
                "-u",
                "root",
                "--single-transaction",  # a consistent dump while slurmdbd still writes
                "--routines",
                f"--result-file={path}",
                "--databases",
                db.name,
            ],
            timeout=300,
            merge_stderr=True,
        )
        if done.returncode != 0:
            raise ClusterError(f"mariadb-dump failed (exit {done.returncode}): {done.text(1500).strip()}")
        path.chmod(0o600)  # accounting records are not every local user's to read
        log.info("devcluster_database_backup", path=str(path), bytes=path.stat().st_size)
        return str(path)

    async def replace_slurmdbd(self, image: str) -> None:
        self._before.setdefault("slurmdbd", self.cluster.release_of("slurmdbd"))
        await self.cluster.swap_slurmdbd(self._release(image))

    async def restore_database(self, backup: str) -> None:
        """What the operator does after a failed conversion (docs/upgrades.md): slurmdbd stopped,
        the dump loaded back, then the slurmdbd the cluster ran before started on it."""
        db = self.cluster.database
        if db is None:
            raise ClusterError("this cluster has no accounting database")
        await self.cluster.stop_slurmdbd()
        done = await process.run(
            [*db.root_client, "-e", f"source {backup}"],
            timeout=300,
            merge_stderr=True,
        )
        if done.returncode != 0:
            raise ClusterError(f"restoring {backup} failed: {done.text(1500).strip()}")
        await self.cluster.swap_slurmdbd(self._before.get("slurmdbd", self.cluster.release))

    # ------------------------------------------------------------------ slurmctld
    async def stop_slurmctld(self, controller: str) -> None:
        ha = self._ha()
        if ha is not None and controller != self.controllers()[-1]:  # a backup: no state of its own
            self._before.setdefault(f"slurmctld-{controller}", ha.controller_release(controller))
            await ha.stop_controller(controller)
            return
        if ha is not None:
            self._before.setdefault(f"slurmctld-{controller}", ha.controller_release(controller))
        else:
            self._before.setdefault("slurmctld", self.cluster.release_of("slurmctld"))
        # most of the copy is made while the controller still runs (a state of 10,000 jobs is
        # about 20,000 files: seconds to copy); copy_state, once it stopped, brings over what
        # changed since, so the time slurmctld does not answer grows with the change, not the size
        self._precopy = StateMirror(self.cluster.dir / "state", self.backup_dir / f"state-{self._stamp()}")
        done = await asyncio.to_thread(self._precopy.sync)
        # written out before the stop: the controller's own state save at its stop syncs its files,
        # and a file system's journal commit then writes the copy's thousands of files first
        await asyncio.to_thread(os.sync)
        log.info("devcluster_state_precopy", **asdict(done))
        if ha is not None:
            await ha.stop_controller(controller)
        else:
            await self.cluster.stop_slurmctld()

    async def copy_state(self) -> str:
        """The StateSaveLocation as the stopped controller left it (the pre-copy brought up to date)."""
        mirror = self._precopy or StateMirror(
            self.cluster.dir / "state", self.backup_dir / f"state-{self._stamp()}"
        )
        self._precopy = None
        done = await asyncio.to_thread(mirror.sync)
        log.info("devcluster_state_copy", path=str(mirror.dest), **asdict(done))
        return str(mirror.dest)

    async def start_slurmctld(self, controller: str, image: str) -> None:
        ha = self._ha()
        if ha is not None:
            await ha.start_controller_of(controller, self._release(image))
        else:
            await self.cluster.start_slurmctld_of(self._release(image))

    async def restore_slurmctld(self, controller: str, saved: str) -> None:
        # killed, not shut down: its state is replaced anyway, and a controller that lost jobs kills
        # them as orphans when their nodes register: every second it lives may cost one
        ha = self._ha()
        if ha is not None:
            await ha.stop_controller(controller, crash=True)
        else:
            await self.cluster.stop_slurmctld(crash=True)
        if saved:
            state = self.cluster.dir / "state"
            await asyncio.to_thread(_replace_tree, Path(saved), state)
        if ha is not None:
            before = self._before.get(f"slurmctld-{controller}", self.cluster.release)
            await ha.start_controller_of(controller, before)
        else:
            await self.cluster.start_slurmctld_of(self._before.get("slurmctld", self.cluster.release))

    # ------------------------------------------------------------------ the workers
    async def roll_workers(self, image: str, version: Version) -> None:
        """Drain up to `budget_workers` at once, wait until their jobs end, move their slurmd,
        undrain once each registered on the new release; a worker that does not come back stops
        the roll, left drained (its reason ours) for the operator."""
        release = self._release(image)
        reason = f"{drains.UPGRADE}{version}"
        client = self.cluster.client(timeout=10.0)
        names = [n for n in self.cluster.node_names if self.cluster.release_of(f"slurmd-{n}") != release]
        # a worker drained before (an operator's, a maintenance's): moved, its drain and reason kept
        theirs = {n.name for n in await client.nodes() if n.state.drain and not _ours(n.reason, reason)}
        for i in range(0, len(names), self.budget_workers):
            batch = names[i : i + self.budget_workers]
            ours = [n for n in batch if n not in theirs]
            if ours:
                await client.drain(ours, reason)
            await self._wait(
                functools.partial(self._idle, batch), f"{', '.join(batch)} without a running job"
            )
            for name in batch:
                try:
                    # begun by the swap once the old slurmd is gone, kept for the wait below
                    watch = self.cluster.slurmd_watch(name)
                    await self.cluster.swap_slurmd(name, release, watch=watch)
                    # a slurmd that dies before it registers: told at once, in its words
                    await watch.race(
                        self.cluster.wait_node(
                            name,
                            # the same major release: a target named "26.05" is met by 26.05.5
                            lambda n: n.state.registered and _same_major(n.version, version),
                            timeout=self.worker_timeout_seconds,
                            what=f"slurmd {name} registered on {version}",
                        )
                    )
                except ClusterError as e:
                    raise ClusterError(
                        f"worker {name} did not come back on {version}, left drained: {e}"
                    ) from e
            if ours:
                await client.undrain(ours)

    async def _idle(self, names: list[str]) -> bool:
        jobs = await self.cluster.client(timeout=10.0).jobs()
        busy = {n for j in jobs if j.state in LIVE_JOB_STATES for n in j.nodes}
        return not busy & set(names)

    async def _wait(self, check: Callable[[], Awaitable[bool]], what: str) -> None:
        deadline = time.monotonic() + 24 * 3600  # a job runs its course: the roll never kills one
        while not await check():
            if time.monotonic() >= deadline:
                raise ClusterError(f"gave up waiting for {what}")
            await asyncio.sleep(0.5)


def _ours(reason: Reason | None, ours: str) -> bool:
    """A drain this roll made (a roll cut short left it; the next one takes it up)."""
    return reason is not None and reason.text == ours


def _same_major(seen: str | None, version: Version) -> bool:
    v = Version.parse(seen or "0")
    return (v.major, v.minor) == (version.major, version.minor)


def _replace_tree(src: Path, dest: Path) -> None:
    """dest's content made src's (dest itself kept: it is the directory slurm.conf names)."""
    for entry in dest.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
