"""A copy of a StateSaveLocation brought up to date in passes, each costing what changed since the last.

The upgrade's state copy is taken in two passes: one while slurmctld still runs (everything), one
once it stopped (what changed meanwhile), because the second is time the controller does not answer.
A pass that walked and compared every file costs the state's size: with 3,000 jobs (a directory of
two files each) about half a second on a loaded machine, longer than Slurm's own restart.

So a pass remembers each directory it found settled: its inode and modification time, and its
subdirectories. A later pass lists such a directory again only when that time moved (an entry was
added, removed or renamed in it); otherwise it only looks into its subdirectories. That rests on
how slurmctld writes its state: every state file is replaced by writing a new one and renaming it
(the directory's time moves), and a job's script and environment are written once, when its
directory is made. A file that could still be being written (its time within `FRESH_NS` of the
pass) leaves its directory unsettled: the next pass lists it and compares every file again.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

# a file this much younger than the pass may still be being written (and timestamps are coarse)
FRESH_NS = 2_000_000_000


@dataclass
class PassCounts:
    """What one pass did: directories listed, entries looked at, files copied, entries removed."""

    dirs_listed: int = 0
    entries_seen: int = 0
    files_copied: int = 0
    removed: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class _Settled:
    inode: int
    mtime_ns: int
    subdirs: tuple[str, ...]


class StateMirror:
    """`dest` made a copy of `src` by `sync()`, as often as wanted; only the first pass costs the size."""

    def __init__(self, src: Path, dest: Path) -> None:
        self.src = src
        self.dest = dest
        self._settled: dict[str, _Settled] = {}  # relative dir ("" for src) -> as last listed
        # relative file -> (size, mtime_ns) of the source when copied: dest is not read back
        self._copied: dict[str, tuple[int, int]] = {}

    def sync(self) -> PassCounts:
        """One pass: dest brought to what src holds now. Not atomic against a writer: a pass while
        slurmctld runs is a head start, the pass after its stop is the copy."""
        began = time.monotonic()
        counts = PassCounts()
        cutoff = time.time_ns() - FRESH_NS
        self.dest.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._dir("", counts, cutoff)
        counts.seconds = round(time.monotonic() - began, 4)
        return counts

    def _dir(self, rel: str, counts: PassCounts, cutoff: int) -> None:
        # paths as strings: a Path made per directory was most of a pass over 3,000 settled ones
        here = os.path.join(self.src, rel)
        try:
            st = os.stat(here)
        except FileNotFoundError:
            return  # removed since its parent was listed (a live pass): a later pass settles it
        known = self._settled.get(rel)
        if known is not None and (known.inode, known.mtime_ns) == (st.st_ino, st.st_mtime_ns):
            for name in known.subdirs:
                self._dir(_join(rel, name), counts, cutoff)
            return
        self._settled.pop(rel, None)
        counts.dirs_listed += 1
        there = self.dest / rel
        there.mkdir(mode=stat.S_IMODE(st.st_mode), exist_ok=True)
        subdirs: list[str] = []
        settled = st.st_mtime_ns < cutoff
        present: set[str] = set()
        try:
            entries = list(os.scandir(here))
        except FileNotFoundError:
            return
        for entry in entries:
            counts.entries_seen += 1
            present.add(entry.name)
            path = _join(rel, entry.name)
            try:
                est = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                settled = False  # gone while listed: listed again next pass
                present.discard(entry.name)
                continue
            if stat.S_ISDIR(est.st_mode):
                subdirs.append(entry.name)
                self._dir(path, counts, cutoff)
                continue
            if est.st_mtime_ns >= cutoff:
                settled = False  # may still be being written: compared again next pass
            seen = (est.st_size, est.st_mtime_ns)
            if self._copied.get(path) != seen or not os.path.lexists(there / entry.name):
                try:
                    shutil.copy2(entry.path, there / entry.name, follow_symlinks=False)
                except FileNotFoundError:
                    settled = False
                    present.discard(entry.name)
                    continue
                self._copied[path] = seen
                counts.files_copied += 1
        for entry in os.scandir(there):
            if entry.name not in present:
                # what the tables say of it stays: a path made again is a new inode, or has no copy
                _remove(Path(entry.path))
                counts.removed += 1
        if settled:
            self._settled[rel] = _Settled(st.st_ino, st.st_mtime_ns, tuple(subdirs))


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
