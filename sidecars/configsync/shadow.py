"""The dry run's StateSaveLocation: a shadow of the live one, kept in step instead of copied each time.

slurmctld loads its state files (jobs, nodes, reservations...) at start and checks that each batch
job's directory (hash.N/job.M/: the script and environment) is there; it reads those only to launch
the job, which a dry run never does. Copying or re-creating that tree for every change costs three
file operations per job (about 30,000 at 10,000 jobs, seconds on a node's disk), so the shadow keeps
the tree, with empty files, across dry runs and only follows what changed: a job directory is
mirrored once when it appears, removed when it goes, and one that the live slurmctld may still be
writing is looked at again next time. The state files themselves (megabytes at most) are copied each
time: they are what the dry run tests against.

The throwaway writes into the shadow (it saves its state, purges what it calls defunct); the next
sync puts that right: every top-level file is replaced, and a hash directory whose mtime moved since
the shadow last matched the live one is compared again. The live directory is only ever read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

SETTLE_SECONDS = 5.0  # a job directory younger than this may still be being written: mirrored again


@dataclass(slots=True)
class _Dir:
    """One live hash.N/job.M as last mirrored."""

    inode: int
    names: tuple[str, ...]
    settled: bool


@dataclass(slots=True)
class SyncStats:
    mirrored: int = 0  # job directories made or remade in the shadow
    removed: int = 0  # job directories the live state no longer has (or the throwaway added)
    files: int = 0  # top-level state files copied
    seconds: float = 0.0


@dataclass
class ShadowState:
    """A shadow of `live` at `path`, owned by (uid, gid) of the live directory when run as root."""

    live: Path
    path: Path
    _dirs: dict[str, dict[str, _Dir]] = field(default_factory=dict)  # hash.N -> job.M -> mirrored
    _hash_mtimes: dict[str, int] = field(default_factory=dict)  # shadow hash.N -> its mtime when in step
    _owner: tuple[int, int] | None = None
    _started: bool = False  # synced once by this process (a shadow found on disk is adopted first)

    def sync(self) -> SyncStats:
        """Bring the shadow in step with the live directory now (blocking: run it in a thread)."""
        started = time.monotonic()
        stats = SyncStats()
        try:
            st = self.live.stat()
            entries = list(os.scandir(self.live))
        except OSError as exc:
            log.warning("dry_run_without_state", state=str(self.live), error=str(exc))
            self.reset()
            self.path.mkdir(mode=0o700, parents=True)
            return stats
        owner = (st.st_uid, st.st_gid) if os.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 0) else None
        if (self._started and owner != self._owner) or (self._started and not self.path.is_dir()):
            self.reset()  # a new owner, or a shadow removed under us: start again
        self._owner = owner
        self._started = True
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._chown(self.path)
        live_hashes = {
            e.name for e in entries if e.is_dir(follow_symlinks=False) and e.name.startswith("hash.")
        }
        for e in os.scandir(self.path):  # whatever the throwaway left at the top: replaced below
            if e.is_dir(follow_symlinks=False):
                if e.name not in live_hashes:
                    shutil.rmtree(e.path, ignore_errors=True)
                    self._dirs.pop(e.name, None)
                    self._hash_mtimes.pop(e.name, None)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(e.path)
        # the state files first, then the job directories: slurmctld makes a job's directory before it
        # saves the job, so every job in the copied state has its directory in the shadow (a job
        # without one would be failed as "Script for JobId=N lost"; one more is only purged)
        for e in entries:
            with contextlib.suppress(OSError):  # a file renamed under us by slurmctld: the .old one stays
                if e.is_file(follow_symlinks=False):
                    shutil.copy2(e.path, self.path / e.name)
                    self._chown(self.path / e.name)
                    stats.files += 1
        for name in sorted(live_hashes):
            with contextlib.suppress(FileNotFoundError):
                self._sync_hash(name, stats)
        stats.seconds = time.monotonic() - started
        return stats

    def reset(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._dirs.clear()
        self._hash_mtimes.clear()

    def _chown(self, path: Path) -> None:
        if self._owner is not None:
            with contextlib.suppress(OSError):  # slurmctld drops to SlurmUser: the shadow must be its
                os.chown(path, *self._owner, follow_symlinks=False)

    def _sync_hash(self, name: str, stats: SyncStats) -> None:
        live = self.live / name
        here = self.path / name
        known = self._dirs.setdefault(name, {})
        found: set[str] = set()  # a shadow left by an earlier config-sync: kept where it matches
        if not here.is_dir():
            here.mkdir(mode=0o700)
            self._chown(here)
            known.clear()
        elif name not in self._hash_mtimes:
            found = set(os.listdir(here)) - known.keys()
        elif os.stat(here).st_mtime_ns != self._hash_mtimes[name]:
            # the throwaway (or anyone) changed it since it was in step: compare it again
            actual = set(os.listdir(here))
            for job in actual - known.keys():
                shutil.rmtree(here / job, ignore_errors=True)
                stats.removed += 1
            for job in known.keys() - actual:
                del known[job]
        now = time.time()
        seen: set[str] = set()
        for e in os.scandir(live):
            if not e.is_dir(follow_symlinks=False):
                continue
            seen.add(e.name)
            had = known.get(e.name)
            if had is not None and had.inode == e.inode() and had.settled:
                continue
            with contextlib.suppress(OSError):  # the job ended and its directory went meanwhile
                mtime = e.stat(follow_symlinks=False).st_mtime
                # the same few file names in every job directory: held once (memory at 50,000 jobs)
                names = tuple(sys.intern(n) for n in sorted(os.listdir(e.path)))
                if had is None and e.name in found and tuple(sorted(os.listdir(here / e.name))) == names:
                    self._adopt(here / e.name, names)
                elif had is None or had.inode != e.inode() or had.names != names:
                    self._mirror(here / e.name, names, replace=had is not None or e.name in found)
                    stats.mirrored += 1
                known[e.name] = _Dir(e.inode(), names, settled=now - mtime > SETTLE_SECONDS)
        for job in (known.keys() | found) - seen:
            shutil.rmtree(here / job, ignore_errors=True)
            known.pop(job, None)
            stats.removed += 1
        self._hash_mtimes[name] = os.stat(here).st_mtime_ns

    def _adopt(self, d: Path, names: tuple[str, ...]) -> None:
        """A job directory already in the shadow, as the live one has it: kept (owner made right)."""
        if self._owner is not None:
            for path in (d, *(d / n for n in names)):
                self._chown(path)

    def _mirror(self, d: Path, names: tuple[str, ...], *, replace: bool) -> None:
        if replace:
            shutil.rmtree(d, ignore_errors=True)
        d.mkdir(mode=0o700, exist_ok=True)
        self._chown(d)
        for n in names:
            (d / n).touch()
            self._chown(d / n)
