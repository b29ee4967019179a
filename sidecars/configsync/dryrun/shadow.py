"""The dry run's StateSaveLocation: a shadow of the live one, kept in step instead of copied each time.

slurmctld loads its state files (jobs, nodes, reservations...) at start and checks that each batch
job's directory (hash.N/job.M/: the script and environment) is there; it reads those only to launch
the job, which a dry run never does. Copying or re-creating that tree for every change costs three
file operations per job (about 30,000 at 10,000 jobs, seconds on a node's disk), so the shadow keeps
the tree, with empty files, across dry runs and only follows what changed: a job directory is
mirrored once when it appears, removed when it goes, and one that the live slurmctld may still be
writing is looked at again next time. The state files themselves (megabytes at most) are copied
whenever they changed: they are what the dry run tests against.

A sync costs what changed, not what is there: a state file is copied again only when the live one
or the shadow's copy changed since (slurmctld saves a file as a new inode, never in place), and a
hash directory is listed only when its live mtime or the shadow's moved (a job directory made or
removed moves it) or one of its job directories was still young. An mtime is trusted only once it
is older than the look that recorded it by more than RACY_SECONDS (a filesystem's clock tick may
be coarse: a change within the tick of the look would leave it unmoved). At 10,000 jobs a change
then lists a few directories instead of 10,000 entries.

The throwaway writes into the shadow (it saves its state, purges what it calls defunct); the next
sync puts that right: a top-level file it replaced or added is copied again or removed, and a hash
directory whose mtime moved since the shadow last matched the live one is compared again. The live
directory is only ever read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

SETTLE_SECONDS = 5.0  # a job directory younger than this may still be being written: mirrored again
RACY_SECONDS = 2.0  # an mtime this close to the look that saw it proves nothing about later changes


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _settled(mtime_ns: int, seen_at: float) -> bool:
    """An mtime recorded at `seen_at` that any later change must move (not within a clock tick)."""
    return mtime_ns / 1e9 < seen_at - RACY_SECONDS


@dataclass(frozen=True, slots=True)
class _Copied:
    """A top-level state file as last copied: the live file's and the copy's stamps, and when."""

    live: tuple[int, int, int]
    shadow: tuple[int, int, int]
    at: float


@dataclass(frozen=True, slots=True)
class _Listed:
    """A hash directory as last listed while in step: its live and shadow mtimes, and when."""

    live_mtime_ns: int
    shadow_mtime_ns: int
    at: float


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
    listed: int = 0  # hash directories listed (the others were unchanged since the last sync)
    seconds: float = 0.0


@dataclass
class ShadowState:
    """A shadow of `live` at `path`, owned by (uid, gid) of the live directory when run as root."""

    live: Path
    path: Path
    _dirs: dict[str, dict[str, _Dir]] = field(default_factory=dict)  # hash.N -> job.M -> mirrored
    _hash_mtimes: dict[str, int] = field(default_factory=dict)  # shadow hash.N -> its mtime when in step
    _copied: dict[str, _Copied] = field(default_factory=dict)  # top-level file -> as last copied
    _listed: dict[str, _Listed] = field(default_factory=dict)  # hash.N -> as last listed in step
    _owner: tuple[int, int] | None = None
    _started: bool = False  # synced once by this process (a shadow found on disk is adopted first)
    # the wall clock that mtimes are compared with (tests move it on instead of waiting)
    clock: Callable[[], float] = time.time
    # False: every hash directory listed and every state file copied at each sync, as before mtimes
    # were trusted (the benchmark's baseline)
    trust_mtimes: bool = True

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
        live_files = {e.name: e for e in entries if e.is_file(follow_symlinks=False)}
        held: set[str] = set()  # state files whose copy still holds
        for e in os.scandir(self.path):  # whatever the throwaway left at the top: removed
            if e.is_dir(follow_symlinks=False):
                if e.name not in live_hashes:
                    shutil.rmtree(e.path, ignore_errors=True)
                    self._forget(e.name)
            elif e.name in live_files and self._copy_holds(e.name, live_files[e.name], e):
                held.add(e.name)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(e.path)
        self._copied = {name: c for name, c in self._copied.items() if name in held}
        # the state files first, then the job directories: slurmctld makes a job's directory before it
        # saves the job, so every job in the copied state has its directory in the shadow (a job
        # without one would be failed as "Script for JobId=N lost"; one more is only purged)
        for name, e in live_files.items():
            if name in held:
                continue  # unchanged on both sides since it was copied
            with contextlib.suppress(OSError):  # a file renamed under us by slurmctld: the .old one stays
                at = self.clock()
                was = e.stat(follow_symlinks=False)
                shutil.copy2(e.path, self.path / name)
                self._chown(self.path / name)
                copy = os.stat(self.path / name, follow_symlinks=False)
                if _stamp(os.stat(e.path, follow_symlinks=False)) == _stamp(was):  # not replaced meanwhile
                    self._copied[name] = _Copied(_stamp(was), _stamp(copy), at)
                stats.files += 1
        by_name = {e.name: e for e in entries}
        for name in sorted(live_hashes):
            with contextlib.suppress(FileNotFoundError):
                if not self._unchanged(name, by_name[name]):
                    self._sync_hash(name, stats)
        stats.seconds = time.monotonic() - started
        return stats

    def reset(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._dirs.clear()
        self._hash_mtimes.clear()
        self._copied.clear()
        self._listed.clear()

    def _forget(self, name: str) -> None:
        self._dirs.pop(name, None)
        self._hash_mtimes.pop(name, None)
        self._listed.pop(name, None)

    def _copy_holds(self, name: str, live: os.DirEntry[str], here: os.DirEntry[str]) -> bool:
        """Whether the shadow's copy of a state file still is the live file's (neither side changed)."""
        was = self._copied.get(name)
        if was is None or not self.trust_mtimes or not _settled(was.live[2], was.at):
            return False
        try:
            return (
                _stamp(live.stat(follow_symlinks=False)) == was.live
                and _stamp(here.stat(follow_symlinks=False)) == was.shadow
            )
        except OSError:
            return False

    def _unchanged(self, name: str, live: os.DirEntry[str]) -> bool:
        """Whether a hash directory is as it was when last listed in step, on both sides, with every
        job directory in it settled: then nothing in it needs a look."""
        was = self._listed.get(name)
        if (
            was is None
            or not self.trust_mtimes
            or not _settled(was.live_mtime_ns, was.at)
            or not _settled(was.shadow_mtime_ns, was.at)
        ):
            return False
        if not all(d.settled for d in self._dirs.get(name, {}).values()):
            return False
        return (
            live.stat(follow_symlinks=False).st_mtime_ns == was.live_mtime_ns
            and os.stat(self.path / name).st_mtime_ns == was.shadow_mtime_ns
        )

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
        now = listed_at = self.clock()
        # the live directory's mtime before its listing: a change during the listing moves it after
        live_mtime = os.stat(live).st_mtime_ns
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
        stats.listed += 1
        self._listed[name] = _Listed(live_mtime, self._hash_mtimes[name], listed_at)

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
