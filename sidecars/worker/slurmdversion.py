"""Which Slurm release this pod's slurmd runs, for the control plane's version skew guard.

Learnt once per slurmd process (a new PID, after a restart or a 24.11 re-exec, is asked again):
`-V` of the very binary the process runs, read through `/proc/<pid>/exe` when this agent sees the
same filesystem as slurmd (the same root). A slurmd on PATH is never asked: it may not be the one
that runs. Where the binary cannot be run from here (a sidecar container has a root of its own)
nothing is reported: what slurmd registered with is in its node record, which the control plane
reads itself, so asking slurmctld for it from every agent would only add load.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from sidecars.slurm import SlurmClient, SlurmError, Version
from sidecars.worker.slurmd import Slurmd

log = structlog.get_logger(__name__)

RESEND_SECONDS = 300.0  # a restarted control plane holds reports in memory only: tell it again


@dataclass(frozen=True, slots=True)
class Learnt:
    version: Version
    pid: int


def _same_root(proc: Path, pid: int) -> bool:
    try:
        theirs, ours = os.stat(proc / str(pid) / "root"), os.stat("/")
    except OSError:
        return False
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


class SlurmdVersion:
    def __init__(self, client: SlurmClient, slurmd: Slurmd, proc: Path = Path("/proc")) -> None:
        self._client = client
        self._slurmd = slurmd
        self._proc = proc
        self.learnt: Learnt | None = None
        self._asked: int | None = None  # the PID last asked about, answered or not
        self._sent: tuple[Version, float] | None = None

    async def learn(self) -> Learnt | None:
        """The running slurmd's release; its binary is run once per slurmd PID."""
        pid = self._slurmd.find(record=False)
        if pid is None or pid == self._asked:
            return self.learnt if self.learnt is not None and self.learnt.pid == pid else None
        self._asked = pid
        if not _same_root(self._proc, pid):
            return None  # not runnable from here: the node record says what it registered with
        try:
            exe = os.readlink(self._proc / str(pid) / "exe")
            version = await self._client.slurmd_version(exe)
        except (OSError, SlurmError) as exc:
            log.info("slurmd_version_not_read", pid=pid, error=str(exc))
            return None
        if self.learnt is None or self.learnt.version != version:
            log.info("slurmd_version_learnt", version=str(version), binary=exe, pid=pid)
        self.learnt = Learnt(version, pid)
        return self.learnt

    def due(self, now: float | None = None) -> Version | None:
        """What to report now: a version not yet delivered, a changed one, or one due again."""
        if self.learnt is None:
            return None
        now = time.monotonic() if now is None else now
        if self._sent is None or self._sent[0] != self.learnt.version:
            return self.learnt.version
        return self.learnt.version if now - self._sent[1] >= RESEND_SECONDS else None

    def delivered(self, version: Version, now: float | None = None) -> None:
        self._sent = (version, time.monotonic() if now is None else now)
