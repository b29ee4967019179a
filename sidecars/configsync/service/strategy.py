"""What differs between the daemons config-sync keeps, as one protocol the service runs: how a set is
read, judged and applied. slurmctld's is the service's own (daemon.py's judge, with HA; ctld.py's
apply); slurmdbd's (slurmdbd/sync.py) and slurmrestd's (restd/sync.py) implement `Strategy`.

A strategy is made by the service (`Make`), handed the service's installer: the state it changes
(state.py) and the words it says (installing.py, reporting.py) are the service's, never its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.judge.validate import Judge, Verdict
from sidecars.configsync.service.installing import Installer

__all__ = ["Make", "Strategy"]


class Strategy(Protocol):
    daemon: str  # the daemon the set is for (/status `daemon`, a hold rule's `Change.daemon`)
    validator: Judge  # the verdict on a set (/v1/plan asks it too)

    def read(self, files: FileSet) -> FileSet:
        """The set as read from the sources, as it is to be staged (in the reading thread)."""
        ...

    async def judge(
        self, files: FileSet, current: FileSet | None, seen: float, *, startup: bool
    ) -> Verdict | None:
        """The verdict to apply `files` on, or None when the change ends here (refused, held,
        installed for a daemon not running yet, or waiting): said through the installer."""
        ...

    async def apply(self, files: FileSet, current: FileSet, verdict: Verdict, seen: float) -> None:
        """The daemon takes the judged set: kept once verified, or rolled back (installer)."""
        ...

    def status(self) -> dict[str, Any]:
        """The daemon's own /status fields, beside the service's."""
        ...


Make = Callable[[Installer], Strategy]  # the service's installer in, the daemon's strategy out
