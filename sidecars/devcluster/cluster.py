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
import functools
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import structlog

from sidecars.devcluster import controllers, mariadb, slinky, slurmdbd
from sidecars.devcluster.controllers import Controller
from sidecars.devcluster.netblocks import (
    MAX_CONTROLLERS,
    AddressBlock,
    AddressesUnavailable,
    AddressLease,
    lease_block,
)
from sidecars.devcluster.ports import PortLease, PortsUnavailable, free_port, lease_ports
from sidecars.devcluster.release import Release
from sidecars.devcluster.slurmconf import ClusterSpec, Ports, render
from sidecars.runtime import process
from sidecars.runtime.pdeathsig import die_with_parent
from sidecars.slurm import Job, Node, SlurmClient, SlurmError

log = structlog.get_logger(__name__)

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
IN_NS_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
STDERR_MARK = "--- slurmctld -D started at"
MAX_DIR_LEN = 80  # the munge socket path must fit in sun_path (108 bytes)

T = TypeVar("T")


class ClusterError(RuntimeError):
    """The cluster could not be started or did not reach the state asked for; says why."""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks: with its PID, an identity no later process shares."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _check_controllers(spec: ClusterSpec) -> str | None:
    """Why this spec's controllers cannot run (None: they can)."""
    if not 1 <= spec.controllers <= MAX_CONTROLLERS:
        return f"a dev cluster runs 1 to {MAX_CONTROLLERS} controllers, not {spec.controllers}"
    if spec.controllers > 1 and spec.foreground_ctld:
        return "several controllers run daemonized: foreground_ctld holds only one"
    return None


class DevCluster:
    """`async with DevCluster(release, spec) as c:` starts the cluster; leaving the block removes it all."""

    def __init__(
        self,
        release: Release,
        spec: ClusterSpec | None = None,
        *,
        base_dir: Path | None = None,
        keep_dir: bool = False,
    ) -> None:
        self.release = release
        self.spec = spec or ClusterSpec()
        if self.spec.accounting and self.spec.shape != "classic":
            raise ClusterError(
                "the accounting shape runs with the classic shape only (munge between daemons)"
            )
        if self.spec.accounting and self.spec.controllers > 1:
            # slurmdbd listens on 127.0.0.1, which the controllers' own namespaces cannot reach
            raise ClusterError("the accounting shape runs with one controller only, for now")
        why = slinky.check(self.spec, release.version) or _check_controllers(self.spec)
        if why:
            raise ClusterError(why)
        self._own_dir = base_dir is None
        self.dir = Path(base_dir or tempfile.mkdtemp(prefix="slc-", dir="/tmp")).resolve()
        self.keep_dir = keep_dir
        if len(str(self.dir)) > MAX_DIR_LEN:
            raise ClusterError(f"cluster dir {self.dir} is longer than {MAX_DIR_LEN} characters")
        self.conf_path = self.dir / "etc" / "slurm.conf"
        self.bin_dir = self.dir / "bin"
        self.out_dir = self.dir / "out"
        self.log_dir = self.dir / "log"
        self.host = socket.gethostname().split(".")[0]
        self.ports: Ports | None = None
        self._lease: PortLease | None = None
        self._unshare: process.Child | None = None
        self.init_pid: int | None = None
        self.pidns: str | None = None
        # (pid, start time) of the namespace's init, kept after stop(): the kernel reaps an init only
        # once every process of its namespace is gone, and then frees the namespace's inode number for
        # the next one made on this machine (another test worker's cluster, a container)
        self._init_id: tuple[int, str] | None = None
        # with spec.foreground_ctld: the nsenter whose child is `slurmctld -D` (nsenter forks to enter
        # the PID namespace, waits for that child and exits with its status)
        self._ctld: process.Child | None = None
        self.ctld_stderr = self.log_dir / "slurmctld.stderr"
        self._extra_ports: dict[str, int] = {}  # Slinky shape: nodes beyond the spec's, started later
        # several controllers (spec.controllers > 1): their addresses, and the host PID of the
        # process holding each one's namespaces (controllers.py)
        self._addresses: AddressLease | None = None
        self.controllers: list[Controller] = []
        self._holders: dict[str, int] = {}
        self.database: mariadb.Database | None = None  # with spec.accounting, once its port is leased

    # ------------------------------------------------------------------ environment
    @property
    def env(self) -> dict[str, str]:
        """The environment a client of this cluster needs: shims first on PATH, SLURM_CONF set."""
        env = dict(os.environ)
        env["PATH"] = f"{self.bin_dir}:{env.get('PATH', IN_NS_PATH)}"
        env["SLURM_CONF"] = str(self.conf_path)
        if self.slinky:  # what tells this cluster's configless slurmd apart from another's
            env["SLURM_SACK_KEY"] = str(self.dir / "etc" / slinky.KEY_FILE)
        return env

    @property
    def slinky(self) -> bool:
        return self.spec.shape == "slinky"

    @property
    def ha(self) -> bool:
        """Whether this cluster runs several controllers (a primary and backups)."""
        return self.spec.controllers > 1

    def client(self, **kwargs: object) -> SlurmClient:
        return SlurmClient(env=self.env, **kwargs)  # type: ignore[arg-type]

    @property
    def node_names(self) -> list[str]:
        return self.spec.node_names()

    def _ns_prefix(self) -> list[str]:
        if self.init_pid is None:
            raise ClusterError("cluster is not running")
        root = ["-r", "-w"] if self.release.root else []
        return ["nsenter", "-t", str(self.init_pid), "-p", "-m", *root, "--"]

    def in_namespace(self, *argv: str) -> list[str]:
        """argv run inside the cluster's namespace (and chroot) with a clean environment."""
        return [*self._ns_prefix(), *self._clean_env(), *argv]

    def _clean_env(self) -> list[str]:
        """`env` words that run a command with only what it needs."""
        return [
            "env",
            "-i",
            f"PATH={IN_NS_PATH}",
            "HOME=/root",
            "LANG=C.UTF-8",
            f"SLURM_CONF={self.conf_path}",
        ]

    def slurmd_argv(self, name: str, *extra: str) -> list[str]:
        """The command that (re)starts one node's slurmd: what a worker agent's restart hook runs.
        Slinky shape: a configless dynamic node (`extra` is then appended to its command line)."""
        if self.slinky:
            assert self.ports is not None
            port = self.ports.nodes.get(name) or self._extra_ports.setdefault(name, free_port())
            servers = [c.address for c in self.controllers] or None
            args = slinky.slurmd_args(self.spec, self.dir, self.ports, name, port, servers)
            return self.in_namespace(*args, *extra)
        return self.in_namespace("slurmd", "-N", name, *extra)

    async def _exec(self, argv: Sequence[str], timeout: float = 30.0, check: bool = True) -> str:
        try:
            done = await process.run(argv, timeout=timeout, cwd=self.dir, merge_stderr=True)
        except process.ProcessTimeout:
            raise ClusterError(f"{' '.join(argv[-4:])} did not finish within {timeout:g}s") from None
        text = done.text()
        if check and done.returncode != 0:
            raise ClusterError(
                f"{' '.join(argv[-4:])} failed (exit {done.returncode}): {text.strip()[-1500:]}"
            )
        return text

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
                    await mariadb.start(self.database, ["nsenter", "-t", str(self.init_pid), "-p", "--"])
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
        self._write_shims()

    def _write_shims(self) -> None:
        for cmd in CLIENT_COMMANDS:
            path = self.bin_dir / cmd
            if self.release.root is None:
                body = f'export SLURM_CONF="${{SLURM_CONF:-{self.conf_path}}}"\nexec /usr/bin/{cmd} "$@"\n'
            else:
                # enter the namespace and the chroot; keep the caller's cwd only when it lies under DIR
                # (bind-mounted at the same path), else DIR/out, so job output lands where the host sees it
                body = (
                    'conf="${SLURM_CONF:-' + str(self.conf_path) + '}"\n'
                    'exec nsenter -t "$(cat ' + str(self.dir / "run" / "init.pid") + ')" -p -m -r -w -- '
                    '/bin/sh -c \'case $1 in "$2"|"$2"/*) cd "$1" 2>/dev/null || cd "$2/out";; '
                    '*) cd "$2/out";; esac; shift 2; exec "$@"\' sh "$PWD" ' + str(self.dir) + " "
                    f'env PATH={IN_NS_PATH} SLURM_CONF="$conf" /usr/bin/{cmd} "$@"\n'
                )
            path.write_text(f"#!/bin/sh\n# dev cluster {self.dir}: Slurm {self.release.version}\n{body}")
            path.chmod(0o755)

    async def _start_namespace(self) -> None:
        reaper = 'trap "" HUP INT TERM; while :; do sleep 3600 & wait $!; done'
        if self.release.root is None:
            argv = [
                "unshare",
                "--pid",
                "--mount",
                "--fork",
                "--kill-child",  # the namespace init dies with unshare, and everything in it with the init
                "--mount-proc",
                "--propagation",
                "private",
                "--",
                "bash",
                "-c",
                reaper,
            ]
        else:
            root = str(self.release.root)
            script = (
                'set -e; R=$0 D=$1; mount -t proc proc "$R/proc"; mount --rbind /dev "$R/dev"; '
                'mount -t sysfs sysfs "$R/sys"; mkdir -p "$R$D"; mount --bind "$D" "$R$D"; '
                # Slinky shape: a /run of its own, where auth/slurm's daemons make their sack.socket
                + ('mount -t tmpfs tmpfs "$R/run"; ' if self.slinky else "")
                + 'exec chroot "$R" /bin/bash -c "$2"'
            )
            argv = [
                "unshare",
                "--pid",
                "--mount",
                "--fork",
                "--kill-child",  # as above: bash, then chroot, then the init it execs, keep the signal
                "--propagation",
                "private",
                "--",
                "bash",
                "-c",
                script,
                root,
                str(self.dir),
                reaper,
            ]
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
                started = _start_time(child)
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

    async def _start_munge(self) -> None:
        m = self.dir / "munge"
        await self._exec(
            self.in_namespace(
                "munged",
                "-f",
                "-S",
                f"{m}/munge.sock",
                f"--key-file={m}/munge.key",
                f"--pid-file={m}/munged.pid",
                f"--log-file={m}/munged.log",
                f"--seed-file={m}/munged.seed",
            )
        )

    async def start_slurmdbd(self, timeout: float = 60.0, *, wait: bool = True) -> None:
        """Start slurmdbd on the cluster's database and wait until it answers (its first start
        creates the tables: seconds); without `wait`, return once it was started, as a container
        runtime restarting it does."""
        pidfile = self.dir / "run" / "slurmdbd.pid"
        if pidfile.exists() and self.hostpid("slurmdbd") is None:
            pidfile.unlink()  # slurmdbd would signal whatever process now has that PID
        logged = self._slurmdbd_log.stat().st_size if self._slurmdbd_log.exists() else 0
        await self._exec(self.in_namespace("slurmdbd"))
        if not wait:
            return
        client = self.client(timeout=10.0)

        async def answering() -> bool:
            # its pid file is written in steps, so this start's log, not the pid, tells a death early
            said = self.slurmdbd_log_tail(since=logged)
            if "fatal:" in said and self.hostpid("slurmdbd") is None:
                raise ClusterError(f"slurmdbd exited at start: {said[-1500:]}")
            return await client.accounting_ping()

        try:
            await self._poll(answering, bool, timeout, "slurmdbd answering", interval=0.2)
        except ClusterError as e:
            raise ClusterError(f"{e}; slurmdbd's log: {self.slurmdbd_log_tail()}") from None

    async def stop_slurmdbd(self, timeout: float = 30.0) -> None:
        """Stop slurmdbd (SIGTERM: it finishes what it was writing) and wait until it is gone."""
        pid = self.hostpid("slurmdbd")
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        await self._poll(self._async(lambda: not _alive(pid)), bool, timeout, "slurmdbd gone")

    @property
    def _slurmdbd_log(self) -> Path:
        return self.log_dir / "slurmdbd.log"

    def slurmdbd_log_tail(self, limit: int = 1500, since: int = 0) -> str:
        """The end of slurmdbd's log, of what it wrote past byte `since` (a start's own lines)."""
        with contextlib.suppress(OSError), self._slurmdbd_log.open("rb") as f:
            f.seek(since)
            return f.read().decode(errors="replace")[-limit:].strip()
        return ""

    async def start_slurmctld(self, timeout: float = 30.0) -> None:
        if self.spec.foreground_ctld:
            await self._start_foreground_ctld()
        else:
            await self._exec(self.in_namespace("slurmctld"))
        client = self.client(timeout=5.0)

        async def answering() -> bool:
            if self._ctld is not None and self._ctld.returncode is not None:
                raise ClusterError(
                    f"slurmctld -D exited with {self._ctld.returncode} at start: {self.ctld_stderr_tail()}"
                )
            return (await client.ping()).up

        await self._poll(answering, bool, timeout, "slurmctld answering")

    # ------------------------------------------------------------------ several controllers
    def _controller(self, name: str) -> Controller:
        for c in self.controllers:
            if c.name == name:
                return c
        raise ClusterError(f"no controller {name!r} (this cluster has: {[c.name for c in self.controllers]})")

    async def _start_controllers(self) -> None:
        """Each controller's namespaces and veth, then its slurmctld, primary first."""
        assert self._addresses is not None
        for c in self.controllers:
            await self._exec(self.in_namespace(*controllers.holder_argv(c, self.dir)))
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

    async def start_controller(self, name: str) -> int:
        """(Re)start one controller's slurmctld in its namespaces; returns its host PID."""
        c = self._controller(name)
        holder = self._holders.get(name)
        if holder is None:
            raise ClusterError(f"the namespaces of {name} are gone")
        if c.pid_file.exists() and self.controller_pid(name) is None:
            c.pid_file.unlink()  # slurmctld kills whatever a stale pid file names
        chroot = self.release.root is not None
        await self._exec([*controllers.enter_argv(holder, chroot), *self._clean_env(), "slurmctld"])
        pid = await self._poll(
            self._async(lambda: self.controller_pid(name)), lambda p: p is not None, 30, f"{name}'s pid file"
        )
        assert pid is not None and self.ports is not None
        port = self.ports.slurmctld
        await self._poll(
            self._async(lambda: controllers.listening(pid, port)), bool, 30, f"{name} listening on {port}"
        )
        return pid

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
            self._async(lambda: _alive(pid)), lambda alive: not alive, 10, f"slurmctld {name} gone"
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

    async def _start_foreground_ctld(self) -> None:
        if self._ctld is not None:
            if self.foreground_pid() is not None:
                raise ClusterError("the foreground slurmctld is still running")
            await self._reap_ctld(10)  # its slurmctld ended; nsenter is about to
        with open(self.ctld_stderr, "ab") as err:  # appended: every start's last words are kept
            err.write(f"{STDERR_MARK} {time.strftime('%FT%TZ', time.gmtime())}\n".encode())
            err.flush()
            # in a session of its own (runtime.process): a terminal's ^C is for pytest, not the controller
            self._ctld = await process.start(
                self.in_namespace("slurmctld", "-D", "-f", str(self.conf_path)),  # as our images run it
                stdout=err,
                stderr=err,
                cwd=self.dir,
            )

    async def plugin_dir(self) -> Path:
        """slurmctld's PluginDir as this host sees it (inside the chroot for that release)."""
        reported = Path((await self.client().show_config())["PluginDir"].split(":")[0])
        if self.release.root is None:
            return reported
        return self.release.root / reported.relative_to("/")

    def foreground_pid(self) -> int | None:
        """Host PID of the `slurmctld -D` this cluster started and holds, while it lives (else None)."""
        if self._ctld is None or self._ctld.returncode is not None:
            return None
        pid = self._ctld.pid
        with contextlib.suppress(OSError, ValueError, IndexError):
            child = int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
            return child if _alive(child) else None
        return None

    @property
    def foreground_exit(self) -> int | None:
        """The exit status of the foreground slurmctld once it ended (-N: killed by signal N)."""
        return None if self._ctld is None else self._ctld.returncode

    def ctld_stderr_tail(self, limit: int = 1500) -> str:
        """The end of what the latest foreground slurmctld wrote (its fatal, when it died)."""
        with contextlib.suppress(OSError):
            text = self.ctld_stderr.read_text(errors="replace")
            return text.rsplit(STDERR_MARK, 1)[-1].split("\n", 1)[-1][-limit:].strip()
        return ""

    async def stop_slurmctld(self, *, crash: bool = False, timeout: float = 30.0) -> None:
        """Stop the controller: saving its state first (`scontrol shutdown slurmctld`), or, with
        `crash`, by SIGKILL, losing whatever it had not saved yet."""
        pid = self.foreground_pid() or self.hostpid("slurmctld")
        if pid is None:
            await self._reap_ctld(timeout)
            return
        gone = self._async(lambda: not _alive(pid))
        if crash:
            os.kill(pid, signal.SIGKILL)
        else:
            await self.client(timeout=10.0).shutdown_controller()
            try:
                await self._poll(gone, bool, timeout / 3, "slurmctld gone after scontrol shutdown")
            except ClusterError:
                # seen once in a loaded full run: a 22.05 controller just restarted took the request
                # and did not end within 10 s. SIGTERM is its own graceful shutdown (state saved)
                log.warning("slurmctld_shutdown_slow", pid=pid, then="SIGTERM")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        await self._poll(gone, bool, timeout, "slurmctld gone")
        await self._reap_ctld(timeout)

    async def _reap_ctld(self, timeout: float) -> None:
        """Wait for the held foreground process to end (its slurmctld is gone or being killed)."""
        if self._ctld is None:
            return
        try:
            await self._ctld.wait(timeout)
        except TimeoutError:
            await self._ctld.kill()

    async def restart_slurmctld(self) -> None:
        await self.stop_slurmctld()
        await self.start_slurmctld()

    async def start_slurmd(self, name: str, *extra: str) -> int:
        """Start one node's slurmd; returns its host PID once its pid file names a live process."""
        (self.dir / "spool" / name).mkdir(parents=True, exist_ok=True)
        pidfile = self.dir / "run" / f"slurmd-{name}.pid"
        if pidfile.exists() and self.hostpid(f"slurmd-{name}") is None:
            # slurmd kills whatever its stale pid file names: that PID may now be a job's
            pidfile.unlink()
        await self._exec(self.slurmd_argv(name, *extra))
        pid = await self._poll(
            self._async(lambda: self.hostpid(f"slurmd-{name}")),
            lambda p: p is not None,
            30,  # seconds only on a loaded machine (parallel test workers on two cores)
            f"slurmd {name} pid file",
        )
        assert pid is not None
        return pid

    async def kill_slurmd(self, name: str) -> int:
        """SIGKILL one node's slurmd (a crash); returns the host PID it had."""
        pid = self.hostpid(f"slurmd-{name}")
        if pid is None:
            raise ClusterError(f"slurmd {name} is not running")
        os.kill(pid, signal.SIGKILL)
        await self._poll(self._async(lambda: _alive(pid)), lambda alive: not alive, 10, f"slurmd {name} gone")
        return pid

    async def stop(self) -> None:
        """Kill the whole namespace (every daemon, slurmstepd and job) and wait until it is gone."""
        if self.init_pid is not None and self.pidns and _alive(self.init_pid):
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

    # ------------------------------------------------------------------ introspection
    def _namespace_exists(self) -> bool:
        """Whether our namespace's init is not yet reaped (it may be dying): until then the namespace
        and its inode number are ours; after, no process of it is left and the number may be reused."""
        return self._init_id is not None and _start_time(self._init_id[0]) == self._init_id[1]

    def processes(self) -> list[int]:
        """Host PIDs of every live process in this cluster's PID namespace."""
        if not self.pidns or not self._namespace_exists():
            return []
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry}/ns/pid") == self.pidns and _alive(int(entry)):
                        found.append(int(entry))
        return found if self._namespace_exists() else []  # reaped while we looked: those were not ours

    def hostpid(self, daemon: str) -> int | None:
        """Host PID of `slurmctld`, `slurmdbd`, `munged` or `slurmd-<node>` from its pid file (which holds a
        namespace PID, and which 24.11 rewrites at every reconfigure)."""
        pidfile = (
            self.dir / "munge" / "munged.pid" if daemon == "munged" else self.dir / "run" / f"{daemon}.pid"
        )
        return self._hostpid_from(pidfile)

    def _hostpid_from(self, pidfile: Path) -> int | None:
        try:
            nspid = int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        for pid in self.processes():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("NSpid:") and int(line.split()[-1]) == nspid:
                        return pid
        return None

    # ------------------------------------------------------------------ jobs and waiting
    async def sbatch(self, *args: str, wrap: str = "sleep 300") -> int:
        """Submit a batch job; returns its id. Output goes to DIR/out."""
        argv = ["sbatch", "--parsable", f"--chdir={self.out_dir}", f"--output={self.out_dir}/slurm-%j.out"]
        done = await process.run([*argv, *args, "--wrap", wrap], timeout=None, env=self.env, cwd=self.out_dir)
        if done.returncode != 0:
            raise ClusterError(f"sbatch failed: {done.stderr.decode().strip()}")
        return int(done.stdout.decode().strip().split(";")[0])

    async def sacct(self, *job_ids: int) -> dict[int, tuple[str, str]]:
        """Job id -> (state, exit code) as slurmdbd recorded each job's allocation (accounting shape);
        a job it has no record of yet is absent. Every job of the last day when no id is given."""
        argv = ["sacct", "-n", "-P", "-X", "--format=JobID,State,ExitCode"]
        argv += ["-j", ",".join(map(str, job_ids))] if job_ids else ["-S", "now-1days"]
        done = await process.run(argv, timeout=30, env=self.env, cwd=self.out_dir)
        if done.returncode != 0:
            raise ClusterError(f"sacct failed: {done.stderr.decode().strip()}")
        records = {}
        for line in done.stdout.decode().splitlines():
            job, state, code = line.split("|")
            records[int(job)] = (state.split()[0], code)  # "CANCELLED by 0" -> CANCELLED
        return records

    async def submit_held(self, count: int, *, loops: int = 8) -> list[int]:
        """Submit `count` individual held batch jobs (`sbatch --hold`, no arrays: each is a job of its
        own in the state, as a busy cluster's queue is) and return their ids. `loops` sbatch loops
        run side by side inside the namespace, saving a shim's nsenter per job: 10,000 jobs take
        about 25 s here. The cluster's MaxJobCount (`ClusterSpec.max_job_count`) must leave room."""
        if count <= 0:
            return []
        loop = (
            'i=0; while [ "$i" -lt "$1" ]; do '
            f"sbatch --hold --parsable --job-name=held --chdir={self.out_dir} --output=/dev/null "
            "--wrap true || exit 1; i=$((i+1)); done"
        )
        shares = [count // loops + (1 if k < count % loops else 0) for k in range(loops)]
        # seconds only on a loaded machine; measured about 2.5 ms of wall time per job here
        timeout = 60 + 0.05 * count
        async with asyncio.TaskGroup() as group:  # one loop failing stops the others
            runs = [
                group.create_task(
                    self._exec(self.in_namespace("sh", "-c", loop, "sh", str(n)), timeout=timeout),
                    name=f"devcluster-held-jobs-{k}",
                )
                for k, n in enumerate(shares)
                if n
            ]
        texts = [run.result() for run in runs]
        ids = [int(line.split(";")[0]) for text in texts for line in text.split() if line[:1].isdigit()]
        if len(ids) != count:
            raise ClusterError(f"submitted {len(ids)} held jobs of {count}")
        return sorted(ids)

    async def scancel(self, job_id: int, *args: str) -> None:
        await self._exec(
            ["env", f"PATH={self.env['PATH']}", f"SLURM_CONF={self.conf_path}", "scancel", *args, str(job_id)]
        )

    @staticmethod
    def _async(fn: Callable[[], T]) -> Callable[[], Awaitable[T]]:
        async def call() -> T:
            return fn()

        return call

    async def _poll(
        self,
        read: Callable[[], Awaitable[T]],
        ok: Callable[[T], bool],
        timeout: float,
        what: str,
        interval: float = 0.1,
    ) -> T:
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            try:
                value = await read()
                if ok(value):
                    return value
                last = value
            except SlurmError as exc:
                last = exc
            if time.monotonic() >= deadline:
                raise ClusterError(f"timed out after {timeout:g}s waiting for {what}; last seen: {last!r}")
            await asyncio.sleep(interval)

    async def wait_job(self, job_id: int, states: set[str] | str, timeout: float = 30.0) -> Job:
        """Poll until the job is in one of `states` (e.g. RUNNING, COMPLETED)."""
        wanted = {states} if isinstance(states, str) else states
        client = self.client(timeout=5.0)

        async def read() -> Job | None:
            return await client.job(job_id)

        job = await self._poll(
            read, lambda j: j is not None and j.state in wanted, timeout, f"job {job_id} in {sorted(wanted)}"
        )
        assert job is not None
        return job

    async def wait_nodes(
        self, ok: Callable[[list[Node]], bool], timeout: float = 30.0, what: str = "nodes"
    ) -> list[Node]:
        client = self.client(timeout=5.0)
        return await self._poll(client.nodes, ok, timeout, what)

    async def wait_node(
        self, name: str, ok: Callable[[Node], bool], timeout: float = 30.0, what: str = ""
    ) -> Node:
        client = self.client(timeout=5.0)

        async def read() -> Node | None:
            return await client.node(name)

        node = await self._poll(read, lambda n: n is not None and ok(n), timeout, what or f"node {name}")
        assert node is not None
        return node
