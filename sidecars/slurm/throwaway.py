"""A throwaway slurmctld: started on files prepared elsewhere (configsync/dryrun/runner.py), watched until it
is the primary controller and has stayed up a moment, or until it died; then killed, always.

Isolation. Where the process may create a network namespace (root or CAP_SYS_ADMIN; or, unprivileged,
inside a user namespace that maps only its own uid, where the kernel and the container's seccomp
profile allow one), the controller runs in a fresh one that has only a loopback interface: nothing
it sends can leave it, so no slurmd, client or slurmdbd can hear it. The namespace is made by a few
lines of Python run by this same interpreter (ctypes `unshare(CLONE_NEWNET)`, then the loopback
brought up and given a second address: glibc's AI_ADDRCONFIG, which Slurm uses, counts no IPv4
address but 127.0.0.1 otherwise, and every lookup fails), so the pod needs neither util-linux nor
iproute2. Where it may not, the files alone isolate it (every address it could reach points at a
port held closed here); `isolation` says which.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from sidecars.protocol.configsync import Isolation
from sidecars.slurm.errors import SlurmError
from sidecars.slurm.runner import SlurmMetrics, run, spawn

log = structlog.get_logger(__name__)


NETNS_UNAVAILABLE = 97  # the namespace helper's exit status when unshare() is not permitted

# argv[1] is config-sync's pid, argv[2] "netns" or "plain", argv[3] "PORT:FILE" or "-", argv[4:] the
# command to exec: first bound to die with its parent (PR_SET_PDEATHSIG: a config-sync killed mid-run
# leaves no throwaway behind; a parent already gone before that is told by the pid, not by "the parent
# is 1": in a container config-sync itself is pid 1), then, for "netns", in a new network namespace with
# a working loopback. With PORT:FILE a child stays behind in that namespace, bound to die with the
# command, and creates FILE once 127.0.0.1:PORT accepts a connection: slurmctld opens its RPC port after
# the initialisation it does once primary (the namespace is closed to config-sync itself)
HELPER = """
import ctypes, fcntl, os, socket, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, 9)
if os.getppid() != int(sys.argv[1]):
    sys.stderr.write("config-sync (pid " + sys.argv[1] + ") is gone\\n")
    sys.exit(1)
del sys.argv[1]
mode, probe = sys.argv[1], sys.argv[2]
del sys.argv[1:3]

def answering(port, marker, argv):
    # slurmctld runs as our child, not the other way round: a watcher forked beside an exec would
    # be slurmctld's child, and its exit a SIGCHLD that 26.05's start takes for EINTR ("Can not read
    # return code from slurmscriptd: Interrupted system call"), a fatal. We watch its port, reap it
    # and exit as it did; it dies with us (PR_SET_PDEATHSIG)
    me = os.getpid()
    child = os.fork()
    if child == 0:
        libc.prctl(1, 9)
        if os.getppid() != me:
            os._exit(1)
        os.execvp(argv[0], argv)
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            break
        if marker is not None:
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    open(marker, "w").close()
                    marker = None
        if marker is None:
            pid, status = os.waitpid(child, 0)
            break
        time.sleep(0.02)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)

if mode == "netns":
    if libc.unshare(0x40000000) != 0:
        err = ctypes.get_errno()
        uid, gid = os.geteuid(), os.getegid()
        # unprivileged: a user namespace mapping only ourselves, which owns the network namespace
        if uid == 0 or libc.unshare(0x10000000 | 0x40000000) != 0:
            sys.stderr.write("unshare(CLONE_NEWNET): " + os.strerror(err) + "\\n")
            sys.exit(97)
        maps = (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1"))
        for name, text in maps:
            with open("/proc/self/" + name, "w") as f:
                f.write(text)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", 0x1 | 0x8 | 0x40))
    fcntl.ioctl(s, 0x8916, struct.pack("16s16s", b"lo:1",
                struct.pack("=HH4s8x", socket.AF_INET, 0, socket.inet_aton("127.0.0.2"))))
    s.close()
if probe != "-":
    port, marker = probe.split(":", 1)
    answering(int(port), marker, sys.argv[1:])
os.execvp(sys.argv[1], sys.argv[1:])
"""

PRIMARY = "Running as primary controller"
SLURMCTLD = ("slurmctld",)  # the default command of the dry run: this release's, on PATH


def uses_slurmdbd(accounting_storage_type: str | None) -> bool:
    return (accounting_storage_type or "").strip().lower() == "accounting_storage/slurmdbd"


_FATAL = re.compile(r"\bfatal\b", re.IGNORECASE)
_ERROR = re.compile(r"\berror\b", re.IGNORECASE)
_NOISE = re.compile(
    r"pmix|MPI:|Could not open .* state file|NOTE: Trying backup state|No .* state file .* to recover"
    r"|specified more than once"  # the dry run's own lines, appended to override the candidate's
    r"|slurm_receive_msg \[127\.0\.0\.1:\d+\]: Zero Bytes",  # its probe of the port, which sends nothing
    re.IGNORECASE,
)


def helper_argv(
    argv: Sequence[str], isolation: Isolation, answering: tuple[int, Path] | None = None
) -> list[str]:
    """`argv` bound to die with this process and, for netns, in a network namespace of its own; with
    `answering` (port, file), the file appears once something there accepts on 127.0.0.1:port."""
    mode = "netns" if isolation == Isolation.NETNS else "plain"  # the helper's own word
    probe = "-" if answering is None else f"{answering[0]}:{answering[1]}"
    return [sys.executable, "-I", "-S", "-c", HELPER, str(os.getpid()), mode, probe, *argv]


async def netns_available(metrics: SlurmMetrics | None = None) -> bool:
    """Whether this process may make a network namespace (asked once by the caller, ~50 ms)."""
    result = await run(helper_argv(["true"], Isolation.NETNS), timeout=10.0, metrics=metrics, check=False)
    if result.returncode != 0:
        log.info("dry_run_netns_unavailable", why=result.stderr.strip()[-200:] or f"exit {result.returncode}")
    return result.returncode == 0


class ClosedPort:
    """A loopback TCP port held bound but never listening: a connection to it is refused at once."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])

    def close(self) -> None:
        self._sock.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True, slots=True)
class Trial:
    started: bool  # it became the primary, answered on its port and was still up `stay` seconds later
    reason: str  # why not, in Slurm's words (its fatal and the errors just before it)
    log: str  # what it wrote last, log file and stderr (bounded)
    seconds: float  # from spawn to verdict
    isolation: Isolation
    kept: tuple[str, ...] = ()  # every log line the caller's `keep` chose, from the whole log
    # seconds from spawn to each milestone seen (None: not reached): where a slow dry run's time went
    primary_seconds: float | None = None
    answering_seconds: float | None = None


class LogFollower:
    """A log read as it grows, every line once, however long it gets: the verdict must not depend
    on where a line falls (at 10,000 jobs slurmctld writes megabytes before it says "primary")."""

    def __init__(
        self, path: Path, keep: Callable[[str], bool] | None = None, *, tail_lines: int = 400
    ) -> None:
        self.path = path
        self.keep = keep
        self.kept: list[str] = []
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self.primary = False
        self.bytes_read = 0
        self._partial = b""

    def poll(self) -> None:
        """Read what was appended since the last call (a line not yet ended waits for its end)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.bytes_read)
                chunk = f.read()
        except OSError:
            return
        if not chunk:
            return
        self.bytes_read += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            self._line(raw.decode("utf-8", "replace"))

    def finish(self) -> None:
        """The last line, even unended (the process is gone: nothing more will come)."""
        self.poll()
        if self._partial:
            self._line(self._partial.decode("utf-8", "replace"))
            self._partial = b""

    def _line(self, line: str) -> None:
        self.tail.append(line)
        if PRIMARY in line:
            self.primary = True
        if self.keep is not None and len(self.kept) < MAX_KEPT_LINES and self.keep(line):
            self.kept.append(line)

    def text(self) -> str:
        return "\n".join(self.tail)


MAX_KEPT_LINES = 200_000  # a bound on memory, far above one line per job of the largest state


def _read(path: Path, limit: int = 512 * 1024) -> str:
    """The start of a small file (the throwaway's stderr: a few lines before its log is open)."""
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def slurm_words(text: str, limit: int = 6) -> str:
    """The fatal and the errors before it: what slurmctld said about why it stopped."""
    lines = [ln.split("] ", 1)[-1].strip() for ln in text.splitlines()]
    lines = [ln.removeprefix("slurmctld: ") for ln in lines if ln and not _NOISE.search(ln)]
    fatal = [i for i, ln in enumerate(lines) if _FATAL.search(ln)]
    if fatal:
        end = fatal[0]
        errors = [ln for ln in lines[:end] if _ERROR.search(ln)][-(limit - 1) :]
        out = [*dict.fromkeys([*errors, lines[end]])]
        return "; ".join(out)
    errors = [*dict.fromkeys(ln for ln in lines if _ERROR.search(ln))]  # the log and stderr repeat them
    return "; ".join(errors[-limit:])


def last_words(text: str, limit: int = 3) -> str:
    """Its last lines, for a death with no error logged (the reason must say more than a status)."""
    lines = [ln.split("] ", 1)[-1].strip() for ln in text.splitlines()]
    lines = [ln.removeprefix("slurmctld: ") for ln in lines if ln and not _NOISE.search(ln)]
    return "; ".join([*dict.fromkeys(lines)][-limit:])


async def try_controller(
    argv: Sequence[str],
    *,
    log_file: Path,
    stderr_file: Path,
    isolation: Isolation,
    port: int | None = None,
    stay: float = 0.0,
    timeout: float = 15.0,
    keep: Callable[[str], bool] | None = None,
    metrics: SlurmMetrics | None = None,
) -> Trial:
    """Start `argv` (a `slurmctld -D -f FILE` command line) and wait until it is the primary, answers
    on `port` (it opens it only after what it initialises once primary: 22.05's priority plugin, for
    one, can still be fatal there) and stays up `stay` seconds more; or until it died. Kill it in every
    case (the caller removes its files). Its whole log is read as it grows; the lines `keep` chooses
    come back in `Trial.kept`."""
    marker = log_file.with_name(f"{log_file.name}.answering")
    full = helper_argv(argv, isolation, None if port is None else (port, marker))
    started = time.monotonic()
    follower = LogFollower(log_file, keep)

    def text() -> str:
        return follower.text() + "\n" + _read(stderr_file)

    primary_at: float | None = None
    up_at: float | None = None  # primary, and answering when a port is watched

    def trial(ok: bool, why: str, now: float) -> Trial:
        def since(t: float | None) -> float | None:
            return None if t is None else t - started

        words, kept = text()[-20000:], tuple(follower.kept)
        return Trial(ok, why, words, now - started, isolation, kept, since(primary_at), since(up_at))

    async with spawn(full, stdout=stderr_file, metrics=metrics) as proc:
        while True:
            now = time.monotonic()
            if proc.returncode is not None:
                await asyncio.sleep(0.05)  # its last words may still be on their way to the file
                follower.finish()
                if primary_at is None and follower.primary:
                    primary_at = now  # said in its last lines, read only now
                words = text()
                why = slurm_words(words)
                if proc.returncode == NETNS_UNAVAILABLE and isolation == Isolation.NETNS:
                    why = why or "no network namespace could be made"
                if not why:
                    said = last_words(words)
                    why = f"slurmctld exited with status {proc.returncode}" + (f" ({said})" if said else "")
                if follower.primary:
                    why = f"after it became the primary controller: {why}"
                return trial(False, why, now)
            follower.poll()
            if primary_at is None and follower.primary:
                primary_at = now
            if up_at is None and follower.primary and (port is None or marker.exists()):
                up_at = now
            if up_at is not None and now - up_at >= stay:
                follower.poll()  # what it wrote up to the verdict, for the caller's job effects
                return trial(True, "", now)
            if up_at is None and now - started >= timeout:
                why = slurm_words(text()) or "no error logged"
                what = (
                    f"became the primary controller but did not answer on its port within {timeout:g}s"
                    if follower.primary
                    else f"did not become the primary controller within {timeout:g}s"
                )
                return trial(False, f"slurmctld {what} ({why})", now)
            await asyncio.sleep(0.02)


async def release_of(command: Sequence[str], metrics: SlurmMetrics | None = None) -> str:
    """The release of the dry run's slurmctld, from `slurmctld -V` ("slurm 24.11.5" -> "24.11.5")."""
    try:
        result = await run([*command, "-V"], timeout=30.0, metrics=metrics, check=False)
    except OSError as exc:  # not installed where config-sync runs
        raise SlurmError([*command, "-V"], str(exc)) from None
    words = (result.stdout or result.stderr).split()
    if result.returncode != 0 or len(words) < 2:
        raise SlurmError([*command, "-V"], result.stderr.strip()[-300:], result.returncode)
    return words[-1]
