"""A dev cluster's files before any daemon starts: its directories, munge key, ports, slurm.conf
and the other configs, the controllers' name files, and the shims that run Slurm's client commands
against this cluster (entering its namespace and chroot for a chroot release)."""

from __future__ import annotations

import os

from sidecars.devcluster import controllers, mariadb, slinky, slurmdbd
from sidecars.devcluster.base import IN_NS_PATH, ClusterBase, ClusterError
from sidecars.devcluster.netblocks import AddressesUnavailable, lease_block
from sidecars.devcluster.ports import PortsUnavailable, lease_ports
from sidecars.devcluster.restd import RESTD_UID
from sidecars.devcluster.slurmconf import JWT_KEY, Ports, render

CLIENT_COMMANDS = (
    "sinfo",
    "squeue",
    "scontrol",
    "sbatch",
    "scancel",
    "srun",
    "salloc",
    "sdiag",
    "sacct",
    "sacctmgr",
)


class ClusterFiles(ClusterBase):
    """Written before the namespace is made: everything a daemon reads at its start."""

    def _write_files(self) -> None:
        for sub in ("etc", "munge", "state", "spool", "log", "run", "out", "dev", "bin"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        (self.dir / "munge").chmod(0o711)  # munged insists every directory on its socket's path is o+x
        self.dir.chmod(0o755)
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        for i in range(self.spec.gpus):
            dev = self.dir / "dev" / f"nvidia{i}"
            try:  # an inert char device (no driver): jobs then get CUDA_VISIBLE_DEVICES too
                os.mknod(dev, 0o666 | 0o020000, os.makedev(195, i))
            except OSError:
                dev.touch()
        extra = 2 if self.spec.accounting else 0  # slurmdbd's and the database's
        try:
            self._lease = lease_ports(2 + extra + self.spec.nodes)
        except PortsUnavailable as e:
            raise ClusterError(str(e)) from None
        ports = self._lease.ports
        nodes = dict(zip(self.node_names, ports[2 + extra :], strict=True))
        self.ports = Ports(ports[0], ports[1], nodes, slurmdbd=ports[2] if extra else 0)
        if extra:
            self.database = mariadb.Database(self.dir / "mariadb", ports[3])
            text = slurmdbd.render(self.dir, self.host, self.ports.slurmdbd, self.database)
            slurmdbd.write(self.dir / "etc", text)
        if self.slinky:
            slinky.write_key(self.dir / "etc")
        block = None
        if self.ha:
            try:
                self._addresses = lease_block()
            except AddressesUnavailable as e:
                raise ClusterError(str(e)) from None
            block = self._addresses.block
            self.controllers = controllers.controllers(self.spec.controller_names(), block, self.dir)
            for sub in (controllers.MOUNT_POINT, *self.spec.controller_names()):
                (self.dir / sub).mkdir(exist_ok=True)
            controllers.write_name_files(self.controllers, block, self.host)
        files = render(self.spec, self.dir, self.ports, self.host, f"c{ports[0]}", block)
        if self.release.root is not None:
            # 24.11's slurmd always initialises a cgroup plugin and dies without cgroupfs unless told not to
            files["cgroup.conf"] = "CgroupPlugin=disabled\n"
        files.update(self.spec.files)
        for name, text in files.items():
            (self.dir / "etc" / name).write_text(text)
        if self.spec.jwt:
            # readable by slurmrestd's user alone (as config-sync stages it), and by root's slurmctld:
            # Slurm refuses a key others may read
            key = self.dir / "etc" / JWT_KEY
            key.chmod(0o400)
            os.chown(key, RESTD_UID, RESTD_UID)
        self._write_shims()

    def _write_shims(self) -> None:
        for cmd in CLIENT_COMMANDS:
            path = self.bin_dir / cmd
            if self.release.root is None:
                body = f'export SLURM_CONF="${{SLURM_CONF:-{self.conf_path}}}"\nexec /usr/bin/{cmd} "$@"\n'
            else:
                # enter the namespace and the chroot; keep the caller's cwd only when it lies under DIR
                # (bind-mounted at the same path), else DIR/out, so job output lands where the host sees it.
                # Four programs per call (sh, nsenter, sh, the client), no more: every Slurm call of a
                # test and of the code under test comes through here (`read` and `export` are the
                # shell's own, where `$(cat ...)` and `env` were one process each)
                body = (
                    "read -r pid < " + str(self.dir / "run" / "init.pid") + "\n"
                    'export SLURM_CONF="${SLURM_CONF:-' + str(self.conf_path) + '}" PATH=' + IN_NS_PATH + "\n"
                    'exec nsenter -t "$pid" -p -m -r -w -- '
                    '/bin/sh -c \'case $1 in "$2"|"$2"/*) cd "$1" 2>/dev/null || cd "$2/out";; '
                    '*) cd "$2/out";; esac; shift 2; exec "$@"\' sh "$PWD" ' + str(self.dir) + " "
                    f'/usr/bin/{cmd} "$@"\n'
                )
            path.write_text(f"#!/bin/sh\n# dev cluster {self.dir}: Slurm {self.release.version}\n{body}")
            path.chmod(0o755)
