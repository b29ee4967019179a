"""Where config-sync stands, owned in one place: the daemon (daemon.py) makes one `SyncState`, and the
installer (installing.py), the reporter (reporting.py) and a daemon's strategy (slurmdbd, slurmrestd)
are handed that same object. Nothing else keeps a copy of any of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sidecars.configsync.apply.harm import Undone
from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.fileset.stage import Applied, Restored
from sidecars.configsync.report.record import Rejection

BACKOFF_FIRST_SECONDS = 0.5  # the first retry of a pass that could not finish; doubled after


@dataclass
class SyncState:
    applied: Applied | None = None  # the last known good set (what the target holds, verified)
    forced: dict[str, Any] | None = None  # who forced the applied set past the job check, and why
    rejected: Rejection | None = None  # the last set refused or held, while the sources still hold it
    # the last time an unverified set was replaced by the good one outside a rollback of ours:
    # config-guard did it as slurmctld (re)started (stage.py), or this sidecar did at its start
    restored: Restored | None = None
    undone: Undone | None = None  # what the last rollback took back of Slurm's (harm.py)
    pending: bool = False  # a change is being judged, or waits to be judged again
    ready: bool = False  # the target holds a verified set (the readiness probe's answer)
    last_error: str | None = None
    backoff: float = 0.0  # the wait before the next pass while pending (0: the re-hash period)
    rejected_moves: int = 0  # the HA role changes seen when the last rejection was made

    @property
    def applied_files(self) -> FileSet | None:
        return None if self.applied is None else self.applied.files

    @property
    def applied_sha256(self) -> str | None:
        return None if self.applied is None else self.applied.files.sha256

    def back_off(self, max_seconds: float) -> float:
        """The next retry's wait, doubled from the last one up to `max_seconds`."""
        self.backoff = min(max(self.backoff * 2, BACKOFF_FIRST_SECONDS), max_seconds)
        return self.backoff
