"""A dev cluster whose daemons move from one Slurm release to another on the same state.

`SwappableCluster` starts as any `DevCluster` (every daemon of `release`), then `swap_slurmdbd`,
`swap_slurmctld` and `swap_slurmd` stop one daemon and start it again from another release's tree
on the same files: the same database, StateSaveLocation, spool and munge socket. That is what an
image change of one role does in Kubernetes, and what Slurm's upgrade guide asks for, one daemon
at a time.

A daemon of another release still runs in the cluster's PID namespace (so it dies with the
cluster), but in a mount namespace of its own whose root is that release's tree, with the cluster
directory bind-mounted at the same path, as the namespace's own chroot has it. The client
shims follow the daemon each command talks to (`client_release_of`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
from pathlib import Path
from typing import Any

import structlog

from sidecars.devcluster.base import IN_NS_PATH, ClusterError
from sidecars.devcluster.cluster import DevCluster
from sidecars.devcluster.files import CLIENT_COMMANDS
from sidecars.devcluster.release import MOUNT_TREE, Release, in_private_mounts
from sidecars.devcluster.startwatch import StartWatch

log = structlog.get_logger(__name__)

ACCOUNTING_COMMANDS = ("sacct", "sacctmgr")

# run from a new mount namespace inside the cluster's PID namespace: the tree gets its own /proc
# (of that PID namespace), /dev, /sys and the cluster directory, then the command runs chrooted there
_ENTER_TREE = (
    f'set -e; R=$1 D=$2; shift 2; {MOUNT_TREE}mkdir -p "$R$D"; mount --bind "$D" "$R$D"; '
    'exec chroot "$R" "$@"'
)


class SwappableCluster(DevCluster):
    """A `DevCluster` whose slurmdbd, slurmctld, slurmd and clients each run a release of their own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # DevCluster's
        super().__init__(*args, **kwargs)
        self.releases: dict[str, Release] = {}  # daemon ("slurmdbd", "slurmctld", "slurmd-n1") -> its release
        self._trees: set[Path] = set()  # release roots where the cluster dir was made, removed at stop

    async def __aenter__(self) -> SwappableCluster:
        await self.start()
        return self

    def release_of(self, daemon: str) -> Release:
        """The release `daemon` runs (or will run at its next start)."""
        return self.releases.get(daemon, self.release)

    def in_release(self, release: Release, *argv: str) -> list[str]:
        """argv run in the cluster's PID namespace from `release`'s tree, with a clean environment."""
        if release == self.release:
            return self.in_namespace(*argv)
        if release.root is None:
            # the host's packages: the namespace's own root is a chroot's; a host daemon would need
            # the host's root under it, which no dev cluster makes
            raise ClusterError(f"a daemon of {release} cannot join a cluster started on {self.release}")
        if self.init_pid is None:
            raise ClusterError("cluster is not running")
        self._trees.add(release.root)
        enter = ["nsenter", "-t", str(self.init_pid), "-p", "--"]
        return [
            *enter,
            *in_private_mounts(_ENTER_TREE, str(release.root), str(self.dir), *self._clean_env(), *argv),
        ]

    # the base cluster starts every daemon through these two: each start follows `releases`
    def in_namespace(self, *argv: str) -> list[str]:
        daemon = _daemon_of(argv)
        base = super().in_namespace(*argv)
        if daemon is None or self.release_of(daemon) == self.release:
            return base
        return self.in_release(self.release_of(daemon), *argv)

    # ------------------------------------------------------------------ the swaps
    async def swap_slurmdbd(self, release: Release, timeout: float = 120.0) -> None:
        """Stop slurmdbd and start `release`'s on the same database; a newer one converts the
        database's tables at its start (its log says so) before it answers."""
        await self.stop_slurmdbd()
        self.releases["slurmdbd"] = release
        self._write_shims()
        log.info("devcluster_swap", daemon="slurmdbd", release=str(release))
        await self.start_slurmdbd(timeout=timeout)

    async def swap_slurmctld(self, release: Release, timeout: float = 60.0) -> None:
        """Stop slurmctld (saving its state) and start `release`'s on the same StateSaveLocation."""
        await self.stop_slurmctld()
        await self.start_slurmctld_of(release, timeout=timeout)

    async def start_slurmctld_of(self, release: Release, timeout: float = 60.0) -> None:
        """Start `release`'s slurmctld on the state as it is (the controller stopped)."""
        self.releases["slurmctld"] = release
        self._write_shims()
        log.info("devcluster_swap", daemon="slurmctld", release=str(release))
        await self.start_slurmctld(timeout=timeout)

    async def swap_slurmd(self, name: str, release: Release, *, watch: StartWatch | None = None) -> int:
        """Stop one node's slurmd (SIGTERM: its jobs' slurmstepd live on) and start `release`'s
        (`watch`: begun once the old one is gone, it tells a death of the new one at the next poll)."""
        await self.stop_slurmd(name)
        if watch is not None:
            watch.begin()
        self.releases[f"slurmd-{name}"] = release
        log.info("devcluster_swap", daemon=f"slurmd-{name}", release=str(release))
        return await self.start_slurmd(name, watch=watch)

    async def stop_slurmd(self, name: str, timeout: float = 30.0) -> None:
        pid = self.hostpid(f"slurmd-{name}")
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        await self._poll(
            self._async(lambda: self.hostpid(f"slurmd-{name}") is None), bool, timeout, f"slurmd {name} gone"
        )

    def client_release_of(self, command: str) -> Release:
        """The release whose `command` the shims run: the accounting commands talk to slurmdbd and
        follow its release, the others slurmctld's (Slurm refuses a client newer than its server,
        and a 26.05 slurmdbd refuses a 24.11 client's persistent connection)."""
        return self.release_of("slurmdbd" if command in ACCOUNTING_COMMANDS else "slurmctld")

    def _write_shims(self) -> None:
        if self.init_pid is None:
            super()._write_shims()  # before the namespace is made every daemon runs the first release
            return
        # written aside, then each renamed over the old: a command run meanwhile (a probe, a
        # poll) reads the old shim or the new one, never half of one
        final, staging = self.bin_dir, self.dir / "run" / "shims.new"
        staging.mkdir(exist_ok=True)
        self.bin_dir = staging
        try:
            super()._write_shims()
        finally:
            self.bin_dir = final
        enter_pid = str(self.init_pid)
        init = f'"$(cat {self.dir / "run" / "init.pid"})"'
        for cmd in CLIENT_COMMANDS:
            release = self.client_release_of(cmd)
            if release != self.release:
                words = self.in_release(release, "/bin/sh", "-c", _CD_AND_RUN, "sh")
                # the namespace's init read at each run, as the first release's shims do
                enter = " ".join(init if w == enter_pid else shlex.quote(w) for w in words[:4])
                enter += " " + " ".join(shlex.quote(w) for w in words[4:])
                body = (
                    f'conf="${{SLURM_CONF:-{self.conf_path}}}"\n'
                    f'exec {enter} "$PWD" {self.dir} '
                    f'env PATH={IN_NS_PATH} SLURM_CONF="$conf" /usr/bin/{cmd} "$@"\n'
                )
                (staging / cmd).write_text(
                    f"#!/bin/sh\n# dev cluster {self.dir}: Slurm {release.version}\n{body}"
                )
                (staging / cmd).chmod(0o755)
            os.replace(staging / cmd, final / cmd)

    async def stop(self) -> None:
        await super().stop()
        for root in self._trees:
            with contextlib.suppress(OSError):
                (root / str(self.dir).lstrip("/")).rmdir()
        self._trees.clear()


# keep the caller's cwd only under DIR (bind-mounted at the same path), else DIR/out
_CD_AND_RUN = (
    'case $1 in "$2"|"$2"/*) cd "$1" 2>/dev/null || cd "$2/out";; *) cd "$2/out";; esac; shift 2; exec "$@"'
)


def _daemon_of(argv: tuple[str, ...]) -> str | None:
    """Which daemon an argv starts: `slurmdbd`, `slurmctld` or `slurmd-<node>` (else None)."""
    if not argv:
        return None
    if argv[0] in ("slurmdbd", "slurmctld"):
        return argv[0]
    if argv[0] == "slurmd" and "-N" in argv[:-1]:
        return f"slurmd-{argv[argv.index('-N') + 1]}"
    return None
