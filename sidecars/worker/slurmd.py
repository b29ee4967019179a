"""Finding this pod's slurmd and restarting it.

slurmd is found by scanning /proc (the pod shares its process namespace, or, in tests, the host's):
a `slurmd` whose command line names our node (`-N name`), else the only slurmd there is. A slurmd
whose SLURM_CONF (configless: SLURM_SACK_KEY) differs from ours belongs to another cluster. On 24.11
every reconfigure re-execs slurmd under a new PID (and, on Debian, under its real name
`slurmd-wlm`): we look for *a* slurmd each time, never hold on to one PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import structlog

from sidecars.runtime import process

log = structlog.get_logger(__name__)

# where a configless slurmd keeps the configuration it fetched, under its SlurmdSpoolDir (Slurm's name)
CONFIGLESS_CACHE = "conf-cache"


class RestartFailed(RuntimeError):
    """slurmd could not be restarted; the message says why (the command's own output where it gave any)."""


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _real_uid(status: bytes | None) -> int | None:
    """The real uid in /proc/PID/status (its owner on disk says nothing: a process that makes
    itself non-dumpable shows as root's there)."""
    for line in (status or b"").splitlines():
        if line.startswith(b"Uid:"):
            words = line.split()
            return int(words[1]) if len(words) > 1 and words[1].isdigit() else None
    return None


def _node_arg(argv: Sequence[str]) -> str | None:
    for i, word in enumerate(argv):
        if word == "-N" and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith("-N") and len(word) > 2:
            return word[2:]
    return None


@dataclass
class Slurmd:
    """This node's slurmd process, as seen from /proc."""

    node_name: str
    restart_command: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None  # the agent's environment (SLURM_CONF) and the command's
    proc: Path = Path("/proc")
    command_timeout: float = 30.0
    _last_seen: float | None = field(default=None, init=False)
    _argv: tuple[str, ...] = field(default=(), init=False)

    def _foreign(self, environ: bytes) -> bool:
        """A slurmd of another cluster: it was pointed at an auth/slurm key (SLURM_SACK_KEY) other
        than ours, or at one while we were not; or its SLURM_CONF differs from ours. A configless
        slurmd's own SLURM_CONF names the copy it fetched (slurmd sets it to its spool's
        `conf-cache` and keeps it across the re-exec of a reconfigure): that tells nothing of its
        cluster, and taking it as foreign made us restart a healthy slurmd after every reconfigure."""
        ours = os.environ if self.env is None else self.env
        theirs = dict(e.split(b"=", 1) for e in environ.split(b"\0") if b"=" in e)
        key, their_key = ours.get("SLURM_SACK_KEY"), theirs.get(b"SLURM_SACK_KEY")
        if their_key is not None and their_key.decode("utf-8", "replace") != key:
            return True
        conf, raw = ours.get("SLURM_CONF"), theirs.get(b"SLURM_CONF")
        if not conf or raw is None:
            return False
        their_conf = raw.decode("utf-8", "replace")
        return their_conf != conf and PurePosixPath(their_conf).parent.name != CONFIGLESS_CACHE

    def _candidates(self) -> list[tuple[int, list[str]]]:
        found = []
        for entry in os.listdir(self.proc):
            if not entry.isdigit():
                continue
            base = self.proc / entry
            comm = (_read(base / "comm") or b"").strip()
            # after a 24.11 reconfigure slurmd re-execs its real binary: Debian's is `slurmd-wlm`
            if comm != b"slurmd" and not comm.startswith(b"slurmd-"):
                continue
            stat = _read(base / "stat")
            if stat is None or stat.rsplit(b")", 1)[-1].split()[:1] == [b"Z"]:
                continue  # a zombie waiting for a slow reaper is no live slurmd
            if _real_uid(_read(base / "status")) not in (0, os.geteuid()):
                # a job's user can name a process slurmd, give it our -N and our SLURM_CONF, and
                # start it when it likes: taken for slurmd it would hide slurmd's death (no heal),
                # or make a static node look dynamic (its record deleted after a drain)
                continue
            raw = _read(base / "cmdline") or b""
            argv = [w.decode("utf-8", "replace") for w in raw.split(b"\0") if w]
            environ = _read(base / "environ")
            if environ is not None and self._foreign(environ):
                continue
            found.append((int(entry), argv))
        return found

    def find(self, *, record: bool = True) -> int | None:
        """The PID of our slurmd, or None when none is visible. `record=False`: a look that leaves
        no trace (a slurmd counts as seen, and its death as one, only through the checks' looks)."""
        cands = self._candidates()
        named = [(pid, argv) for pid, argv in cands if _node_arg(argv) == self.node_name]
        unnamed = [(pid, argv) for pid, argv in cands if _node_arg(argv) is None]
        pick = named or (unnamed if len(unnamed) == 1 else [])
        if not pick:
            return None
        pid, argv = min(pick)  # a daemon that forks a child: the parent is the daemon
        if record:
            self._last_seen = time.monotonic()
            self._argv = tuple(argv)
        return pid

    @property
    def ever_seen(self) -> bool:
        return self._last_seen is not None

    def missing_for(self) -> float:
        """Seconds since a slurmd was last seen (0 when it is visible now)."""
        if self.find() is not None:
            return 0.0
        return time.monotonic() - self._last_seen if self._last_seen is not None else float("inf")

    @property
    def dynamic(self) -> bool:
        """Started as a dynamic node (`slurmd -Z`)."""
        return "-Z" in self._argv

    @property
    def can_restart(self) -> bool:
        return bool(self.restart_command) or self.find() is not None

    async def _stop(self, pid: int, wait: float = 5.0) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and self.find() == pid:
            await asyncio.sleep(0.05)
        if self.find() == pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    async def restart(self) -> str:
        """Restart slurmd; returns what was done. Raises RestartFailed."""
        pid = self.find()
        if not self.restart_command:
            if pid is None:
                raise RestartFailed("no restart command configured and no slurmd process visible")
            # the container's restart policy brings it back (the pod shares its process namespace)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            return f"sent SIGTERM to slurmd pid {pid}"
        if pid is not None:
            await self._stop(pid)
        try:  # timed out or cancelled: the command's whole process group is killed (runtime.process)
            done = await process.run(
                self.restart_command, timeout=self.command_timeout, env=self.env, merge_stderr=True
            )
        except OSError as exc:
            raise RestartFailed(f"cannot run {self.restart_command[0]}: {exc.strerror}") from None
        except process.ProcessTimeout:
            raise RestartFailed(f"restart command did not finish within {self.command_timeout:g}s") from None
        text = done.text().strip()
        if done.returncode != 0:
            raise RestartFailed(f"restart command exited {done.returncode}: {text[-500:] or 'no output'}")
        return "ran restart command" + (f": {text[-200:]}" if text else "")
