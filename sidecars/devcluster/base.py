"""What every part of a dev cluster shares: its directory and spec, the environment and argv that
reach it (shims, its PID namespace, a clean environment), running a command there, finding its
daemons' host PIDs, and polling until a state is reached (never a fixed sleep)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

from sidecars.devcluster import mariadb, slinky
from sidecars.devcluster.controllers import Controller
from sidecars.devcluster.netblocks import MAX_CONTROLLERS, AddressLease
from sidecars.devcluster.ports import PortLease, free_port
from sidecars.devcluster.release import Release
from sidecars.devcluster.slurmconf import ClusterSpec, Ports
from sidecars.runtime import process
from sidecars.slurm import SlurmClient, SlurmError

IN_NS_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
MAX_DIR_LEN = 80  # the munge socket path must fit in sun_path (108 bytes)

T = TypeVar("T")


class ClusterError(RuntimeError):
    """The cluster could not be started or did not reach the state asked for; says why."""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def start_time(pid: int) -> str | None:
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


class ClusterBase:
    """The state and means the parts of `DevCluster` share (files, daemons, controllers, jobs)."""

    def __init__(
        self,
        release: Release,
        spec: ClusterSpec | None = None,
        *,
        base_dir: Path | None = None,
        keep_dir: bool = False,
        db_template: Path | None = None,
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
        # with spec.accounting: where the database's datadir is made once (mariadb.template) and
        # copied from, shared with other clusters (a test run's); None makes a new one per cluster
        self.db_template = db_template

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

    # ------------------------------------------------------------------ introspection
    def _namespace_exists(self) -> bool:
        """Whether our namespace's init is not yet reaped (it may be dying): until then the namespace
        and its inode number are ours; after, no process of it is left and the number may be reused."""
        return self._init_id is not None and start_time(self._init_id[0]) == self._init_id[1]

    def processes(self) -> list[int]:
        """Host PIDs of every live process in this cluster's PID namespace."""
        if not self.pidns or not self._namespace_exists():
            return []
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry}/ns/pid") == self.pidns and alive(int(entry)):
                        found.append(int(entry))
        return found if self._namespace_exists() else []  # reaped while we looked: those were not ours

    def runs(self, daemon: str, *words: str) -> bool:
        """Whether a process of this namespace runs `daemon` (its argv[0]'s name) with `words`
        among its arguments: a daemonizing one's start is seen through its forks, before any pid
        file names it (and its end, when it dies before it writes one)."""
        for pid in self.processes():
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
                if Path(argv[0]).name == daemon and all(w in argv[1:] for w in words):
                    return True
        return False

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

    # ------------------------------------------------------------------ waiting
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
