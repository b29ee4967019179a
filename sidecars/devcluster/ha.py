"""Several controllers (`ClusterSpec(controllers=N)`): each slurmctld in namespaces of its own with
its own address, started primary first; which one is in control, killing one, a takeover."""

from __future__ import annotations

import functools
import os
import shutil
import signal
from pathlib import Path

import structlog

from sidecars.devcluster import controllers
from sidecars.devcluster.base import ClusterBase, ClusterError, alive
from sidecars.devcluster.controllers import Controller
from sidecars.devcluster.netblocks import AddressBlock
from sidecars.devcluster.startwatch import StartWatch
from sidecars.runtime import process

log = structlog.get_logger(__name__)


class ClusterControllers(ClusterBase):
    """A cluster of several controllers (`spec.controllers > 1`): each in namespaces of its own."""

    def _controller(self, name: str) -> Controller:
        for c in self.controllers:
            if c.name == name:
                return c
        raise ClusterError(f"no controller {name!r} (this cluster has: {[c.name for c in self.controllers]})")

    async def _start_controllers(self) -> None:
        """Each controller's namespaces and veth, then its slurmctld, primary first."""
        assert self._addresses is not None
        own_etc = self.spec.conf_per_controller
        for c in self.controllers:
            if own_etc:  # each pod's /etc/slurm: a copy now, each config-sync's target later
                shutil.copytree(self.conf_path.parent, c.etc, symlinks=True, dirs_exist_ok=True)
            await self._exec(self.in_namespace(*controllers.holder_argv(c, self.dir, own_etc=own_etc)))
            pid = await self._poll(
                self._async(functools.partial(self._hostpid_from, c.dir / controllers.HOLDER_PID_FILE)),
                lambda p: p is not None,
                10,
                f"namespaces of {c.name} (see {c.dir / controllers.HOLDER_LOG})",
            )
            assert pid is not None
            self._holders[c.name] = pid
            try:
                await controllers.wire(c, self._addresses.block, pid)
            except controllers.NetworkError as e:
                raise ClusterError(str(e)) from None
        for c in self.controllers:
            await self.start_controller(c.name)
        await self.wait_primary(self.controllers[0].name, timeout=60)

    def _ready_to_start(self, name: str) -> tuple[Controller, int]:
        """Controller `name` and the host PID of the process holding its namespaces, with a stale
        pid file of its removed: what starting its slurmctld needs, on any release."""
        c = self._controller(name)
        holder = self._holders.get(name)
        if holder is None:
            raise ClusterError(f"the namespaces of {name} are gone")
        if c.pid_file.exists() and self.controller_pid(name) is None:
            c.pid_file.unlink()  # slurmctld kills whatever a stale pid file names
        return c, holder

    async def start_controller(self, name: str) -> int:
        """(Re)start one controller's slurmctld in its namespaces; returns its host PID."""
        _, holder = self._ready_to_start(name)
        chroot = self.release.root is not None
        await self._exec([*controllers.enter_argv(holder, chroot), *self._clean_env(), "slurmctld"])
        return await self._until_listening(name)

    async def _until_listening(self, name: str, *, watch: StartWatch | None = None) -> int:
        """Controller `name`'s host PID once its pid file is written and it listens on its port
        (with `watch`, one that dies first is told at the next poll, in its own words)."""

        def check() -> None:
            if watch is not None:
                watch.check()

        def pid_written() -> int | None:
            check()
            return self.controller_pid(name)

        pid = await self._poll(self._async(pid_written), lambda p: p is not None, 30, f"{name}'s pid file")
        assert pid is not None and self.ports is not None
        port = self.ports.slurmctld

        def listens() -> bool:
            check()
            return controllers.listening(pid, port)

        await self._poll(self._async(listens), bool, 30, f"{name} listening on {port}")
        return pid

    def conf_dir(self, name: str) -> Path:
        """The configuration directory controller `name` reads: its own with `conf_per_controller`
        (its pod's /etc/slurm, where its config-sync stages), else the cluster's."""
        c = self._controller(name)
        return c.etc if self.spec.conf_per_controller else self.conf_path.parent

    def controller_env(self, name: str) -> dict[str, str]:
        """A client's environment in controller `name`'s pod: its slurm.conf, which names every
        controller, so its commands still reach whichever is in control."""
        # TMPDIR in the cluster's dir: a chroot's Slurm sees that (a controller asked alone is asked
        # through a copy of slurm.conf made there: sidecars/slurm/standby.py)
        return {**self.env, "SLURM_CONF": str(self.conf_dir(name) / "slurm.conf"), "TMPDIR": str(self.dir)}

    @property
    def address_block(self) -> AddressBlock | None:
        """The addresses leased to this cluster's controllers (None with one controller)."""
        return None if self._addresses is None else self._addresses.block

    @property
    def links(self) -> list[str]:
        """The host ends of this cluster's veths (one per controller; none with one controller)."""
        if self._addresses is None:
            return []
        return [self._addresses.block.host_link(c.index) for c in self.controllers]

    def controller_pid(self, name: str) -> int | None:
        """Host PID of a controller's slurmctld while it runs (else None)."""
        return self._hostpid_from(self._controller(name).pid_file)

    async def kill_controller(self, name: str) -> int:
        """SIGKILL one controller's slurmctld (its pod lost with its node); returns the PID it had."""
        pid = self.controller_pid(name)
        if pid is None:
            raise ClusterError(f"slurmctld {name} is not running")
        os.kill(pid, signal.SIGKILL)
        await self._poll(
            self._async(lambda: alive(pid)), lambda alive: not alive, 10, f"slurmctld {name} gone"
        )
        return pid

    async def in_control(self, name: str) -> bool:
        """Whether this controller serves requests now, not as a standby: asked alone, through a
        copy of slurm.conf that names only it (a standby refuses every request but a ping, and a
        client that knows no other controller then gives up instead of trying the next)."""
        c = self._controller(name)
        alone = self.dir / "etc" / f"only-{name}.conf"
        others = [ln for ln in self.conf_path.read_text().splitlines() if not ln.startswith("SlurmctldHost=")]
        alone.write_text("\n".join([f"SlurmctldHost={c.name}({c.address})", *others]) + "\n")
        try:
            done = await process.run(
                ["scontrol", "show", "partition"],
                timeout=15,
                env={**self.env, "SLURM_CONF": str(alone)},
                merge_stderr=True,
            )
        except process.ProcessTimeout:
            log.warning("devcluster_controller_silent", controller=name, seconds=15)
            return False
        if done.returncode != 0:
            log.debug(
                "devcluster_controller_not_in_control", controller=name, said=done.text().strip()[-300:]
            )
        return done.returncode == 0

    async def primary(self) -> str | None:
        """The controller in control now (None: none is): the first, in `SlurmctldHost` order, that
        runs, listens and serves requests. Not from `scontrol ping`: a backup answers pings in
        standby too, and one just started answers its first only seconds later (measured on 24.11
        and 26.05), which the ping waits out."""
        assert self.ports is not None
        for c in self.controllers:
            pid = self.controller_pid(c.name)
            if (
                pid is not None
                and controllers.listening(pid, self.ports.slurmctld)
                and await self.in_control(c.name)
            ):
                return c.name
        return None

    async def wait_primary(self, name: str, timeout: float = 60.0) -> None:
        """Poll until `name` is the controller in control."""
        self._controller(name)
        await self._poll(self.primary, lambda p: p == name, timeout, f"{name} in control", interval=0.2)

    async def takeover(self, name: str | None = None) -> None:
        """`scontrol takeover [INDEX]`: a backup (the first, unless named) takes control now; the
        controllers before it in `SlurmctldHost` shut down. Returns once `name` is in control."""
        target = self._controller(name) if name else self.controllers[1]
        if target.index == 0:
            raise ClusterError(f"{target.name} is the configured primary: only a backup takes over")
        await self._exec(
            [
                "env",
                f"PATH={self.env['PATH']}",
                f"SLURM_CONF={self.conf_path}",
                "scontrol",
                "takeover",
                str(target.index),
            ]
        )
        await self.wait_primary(target.name, timeout=max(30.0, 3.0 * self.spec.slurmctld_timeout_seconds))
