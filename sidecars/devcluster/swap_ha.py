"""A swappable dev cluster with several controllers: each controller's slurmctld moves to another
release on its own (`swap_controller`), in its namespaces, as an HA pair's pods are replaced one at a
time in Kubernetes.

A controller of another release runs in the cluster's PID namespace and its holder's network and UTS
namespaces (its address and host name), in a mount namespace of its own whose root is that release's
tree (`SwappableCluster.in_release`), with the controller's own mounts made there again: its
directory where slurm.conf names it, its /etc/hosts and resolv.conf, its configuration directory."""

from __future__ import annotations

import contextlib
import os
import signal

import structlog

from sidecars.devcluster import controllers
from sidecars.devcluster.base import alive
from sidecars.devcluster.release import Release
from sidecars.devcluster.startwatch import StartWatch
from sidecars.devcluster.swap import SwappableCluster

log = structlog.get_logger(__name__)

# inside the release's tree: the holder's mounts (controllers.HOLDER_SCRIPT) made again, then the daemon
_CONTROLLER_MOUNTS = (
    'set -e; mount --bind "$1" "$2"; mount --bind "$1/hosts" /etc/hosts; '
    'if [ -e /etc/resolv.conf ]; then mount --bind "$1/resolv.conf" /etc/resolv.conf; fi; '
    'if [ -n "$3" ]; then mount --bind "$1/etc" "$3"; fi; shift 3; exec "$@"'
)


class SwappableControllers(SwappableCluster):
    """`SwappableCluster` with `spec.controllers > 1`: each controller's release its own
    (`release_of("slurmctld-<name>")`); the clients follow the configured primary's."""

    def controller_release(self, name: str) -> Release:
        return self.release_of(f"slurmctld-{name}")

    def controller_argv(self, name: str, release: Release) -> list[str]:
        """The daemon's words for controller `name` on `release` (a test's sabotage goes here)."""
        return ["slurmctld"]

    async def start_controller(self, name: str) -> int:
        release = self.controller_release(name)
        if release == self.release:
            return await super().start_controller(name)
        c, holder = self._ready_to_start(name)
        own_etc = str(self.conf_path.parent) if self.spec.conf_per_controller else ""
        mounts = [
            "/bin/sh",
            "-c",
            _CONTROLLER_MOUNTS,
            "sh",
            str(c.dir),
            str(self.dir / controllers.MOUNT_POINT),
        ]
        words = self.in_release(
            release, *mounts, own_etc, *self._clean_env(), *self.controller_argv(name, release)
        )
        # in_release enters the cluster's PID namespace only: the holder's network and name too
        net = [f"--net=/proc/{holder}/ns/net", f"--uts=/proc/{holder}/ns/uts"]
        # its own log and pid file: one that dies at start is told at the next poll, in its words
        watch = StartWatch(f"slurmctld {name}", c.log_file, lambda: self.controller_pid(name))
        await self._start_daemon([words[0], *net, *words[1:]], watch)
        return await self._until_listening(name, watch=watch)

    async def stop_controller(self, name: str, *, crash: bool = False, timeout: float = 30.0) -> None:
        """SIGTERM (slurmctld's own shutdown: a controller in control saves its state first), or
        SIGKILL with `crash`; returns once it is gone."""
        pid = self.controller_pid(name)
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL if crash else signal.SIGTERM)
        await self._poll(self._async(lambda: not alive(pid)), bool, timeout, f"slurmctld {name} gone")

    async def start_controller_of(self, name: str, release: Release) -> int:
        """Start `release`'s slurmctld for controller `name` (stopped); its host PID."""
        self.releases[f"slurmctld-{name}"] = release
        if self._controller(name).index == 0:  # the clients follow the configured primary
            self.releases["slurmctld"] = release
            self._write_shims()
        log.info("devcluster_swap", daemon=f"slurmctld-{name}", release=str(release))
        return await self.start_controller(name)

    async def swap_controller(self, name: str, release: Release) -> int:
        """Stop one controller and start `release`'s in its place; its host PID."""
        await self.stop_controller(name)
        return await self.start_controller_of(name, release)
