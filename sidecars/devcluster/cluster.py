"""A real Slurm cluster on this one machine: munged, one slurmctld and N slurmd, for tests and the demo.

Every process of a cluster runs in one PID namespace whose init is a small reaper loop we own:
killing that init makes the kernel kill everything in it, slurmstepd and job processes included,
which `scontrol shutdown` leaves running. The init dies with `unshare` (`--kill-child`) and
`unshare` with the thread that started it (PR_SET_PDEATHSIG), so a cluster never outlives its
owner, even one killed by SIGKILL. For the chroot release the namespace's root is the
chroot, with the cluster directory bind-mounted at the same path, so paths mean the same inside
and out. Client commands go through shims in DIR/bin that set SLURM_CONF (and, for the chroot,
enter the namespace), so code under test runs `scontrol` from PATH as it does in production.

With `ClusterSpec(foreground_ctld=True)` slurmctld runs as our images run it, `slurmctld -D`, a
child the cluster holds (its stderr in DIR/log/slurmctld.stderr): its death is seen at once, and a
"container restart" is `start_slurmctld()` on whatever files are on disk.

The scale shape (`ClusterSpec(node_records={"DOWN": 1000}, max_job_count=20000)`) adds node records
without a slurmd beside the real nodes; `submit_held()` fills the queue with held batch jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from pathlib import Path
from types import TracebackType

import structlog

from sidecars.devcluster import controllers, mariadb
from sidecars.devcluster.base import ClusterError, alive, start_time
from sidecars.devcluster.daemons import ClusterDaemons
from sidecars.devcluster.files import ClusterFiles
from sidecars.devcluster.ha import ClusterControllers
from sidecars.devcluster.jobs import ClusterJobs
from sidecars.devcluster.release import MOUNT_TREE, in_private_mounts
from sidecars.runtime import process
from sidecars.runtime.pdeathsig import die_with_parent
from sidecars.slurm import Node

log = structlog.get_logger(__name__)

__all__ = ["ClusterError", "DevCluster"]


class DevCluster(ClusterFiles, ClusterDaemons, ClusterControllers, ClusterJobs):
    """`async with DevCluster(release, spec) as c:` starts the cluster; leaving the block removes it all.

    Its parts, one activity each: `base` (state, environment, commands, PIDs, polling), `files`,
    `daemons`, `ha` (several controllers) and `jobs`; here, the cluster's life: its PID namespace
    made, the daemons started in order, and everything removed.
    """

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> DevCluster:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        started = time.monotonic()
        try:
            self._write_files()
            await self._start_namespace()
            if not self.slinky:
                await self._start_munge()
            if self.database is not None:
                try:
                    made = await mariadb.template(self.db_template) if self.db_template else None
                    enter = ["nsenter", "-t", str(self.init_pid), "-p", "--"]
                    await mariadb.start(self.database, enter, template=made)
                except mariadb.DatabaseError as e:
                    raise ClusterError(str(e)) from None
                await self.start_slurmdbd()
            if self.ha:
                await self._start_controllers()
            else:
                await self.start_slurmctld()
            for name in self.node_names:
                await self.start_slurmd(name)
            await self.wait_nodes(self._all_idle, timeout=60, what="every node with a slurmd idle")
        except BaseException:
            await self.stop()
            raise
        log.info(
            "devcluster_up",
            dir=str(self.dir),
            release=str(self.release),
            seconds=round(time.monotonic() - started, 2),
        )

    def _all_idle(self, nodes: list[Node]) -> bool:
        """Every node that runs a slurmd is idle and registered; node records (the scale shape) are
        never waited for: they have no slurmd, and FUTURE ones are not even listed."""
        by_name = {n.name: n for n in nodes}
        return all(
            (n := by_name.get(name)) is not None and n.state.base == "IDLE" and n.state.registered
            for name in self.node_names
        )

    async def _start_namespace(self) -> None:
        reaper = 'trap "" HUP INT TERM; while :; do sleep 3600 & wait $!; done'
        # the namespace's init dies with unshare, and everything in it with the init (in a tree: bash,
        # then chroot, then the init it execs, keep the signal)
        pid_ns = ("--pid", "--fork", "--kill-child")
        if self.release.root is None:
            argv = in_private_mounts(reaper, unshare=(*pid_ns, "--mount-proc"))
        else:
            script = (
                f'set -e; R=$1 D=$2; {MOUNT_TREE}mkdir -p "$R$D"; mount --bind "$D" "$R$D"; '
                # Slinky shape: a /run of its own, where auth/slurm's daemons make their sack.socket
                + ('mount -t tmpfs tmpfs "$R/run"; ' if self.slinky else "")
                + 'exec chroot "$R" /bin/bash -c "$3"'
            )
            argv = in_private_mounts(script, str(self.release.root), str(self.dir), reaper, unshare=pid_ns)
        init_log = open(self.log_dir / "init.log", "wb")  # noqa: SIM115 - handed to the child
        try:
            self._unshare = await process.start(
                argv,
                stdout=init_log,
                stderr=init_log,
                preexec_fn=die_with_parent(),  # and unshare with us, however we end (SIGKILL included)
            )
        finally:
            init_log.close()
        pid = self._unshare.pid
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError, IndexError):
                child = int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
                root_ok = self.release.root is None or os.readlink(f"/proc/{child}/root") == str(
                    self.release.root.resolve()
                )
                started = start_time(child)
                if (
                    root_ok
                    and started is not None
                    and os.readlink(f"/proc/{child}/ns/pid") != os.readlink("/proc/self/ns/pid")
                ):
                    self.init_pid = child
                    self.pidns = os.readlink(f"/proc/{child}/ns/pid")
                    self._init_id = (child, started)
                    break
            if self._unshare.returncode is not None:
                break
            await asyncio.sleep(0.02)
        if self.init_pid is None:
            raise ClusterError(f"namespace init did not come up: {(self.log_dir / 'init.log').read_text()}")
        (self.dir / "run" / "init.pid").write_text(f"{self.init_pid}\n")

    async def stop(self) -> None:
        """Kill the whole namespace (every daemon, slurmstepd and job) and wait until it is gone."""
        if self.init_pid is not None and self.pidns and alive(self.init_pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.readlink(f"/proc/{self.init_pid}/ns/pid") == self.pidns:
                    os.kill(self.init_pid, signal.SIGKILL)
        await self._reap_ctld(10)  # its slurmctld died with the namespace; nsenter follows
        if self._unshare is not None:
            await self._unshare.kill()
        if self.pidns:
            deadline = time.monotonic() + 10
            while self.processes() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        if self.release.root is not None:
            with contextlib.suppress(OSError):
                (self.release.root / str(self.dir).lstrip("/")).rmdir()
        self.init_pid = None
        self._holders.clear()
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        if self._addresses is not None:
            # the holders died with the namespace; their veths go a moment later, then the block is free
            left = await controllers.wait_links_gone(self._addresses.block, len(self.controllers), 10)
            if left:
                log.error("devcluster_links_left", links=left)
            else:
                self._addresses.release()
            self._addresses = None
        if self._own_dir and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
