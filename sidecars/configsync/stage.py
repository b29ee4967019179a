"""Putting a file set into the target directory atomically, and keeping the last known good set.

The target keeps the kubelet's own trick, under names of ours so the two are never confused:

    TARGET/..sync_00000007_3fa2c1/   the files of generation 7 (modes kept, key files 0600)
    TARGET/..current -> ..sync_00000007_3fa2c1
    TARGET/slurm.conf -> ..current/slurm.conf

One rename of `..current` swaps every file at once, so a reader never sees half a set. A crash at
any step leaves `..current` naming one complete generation; `recover()` makes the per-file links
agree with it, so the target is then entirely that set. The target may be a mount point (an
emptyDir), which is why the swap happens inside it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from sidecars.configsync.sources import FileEntry, FileSet, read_source

log = structlog.get_logger(__name__)

CURRENT = "..current"
GEN_PREFIX = "..sync_"
LINK_PREFIX = CURRENT + "/"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def target_mode(entry: FileEntry) -> int:
    return 0o600 if entry.secret else entry.mode


def write_files(
    where: Path,
    files: FileSet,
    transform: Callable[[str, bytes], bytes] | None = None,
    *,
    durable: bool = True,
) -> None:
    """Write every file of the set into a new directory `where`, durably unless told it is scratch
    (a copy for a parse or a dry run, removed within the second: no fsync to wait for)."""
    where.mkdir(mode=0o755, parents=True)
    for e in files.files.values():
        data = transform(e.name, e.data) if transform else e.data
        path = where / e.name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, target_mode(e))
        try:
            _write_all(fd, data)
            os.fchmod(fd, target_mode(e))  # the umask must not widen or narrow what the source said
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    if durable:
        _fsync_dir(where)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _replace_symlink(path: Path, dest: str) -> None:
    """Make `path` a symlink to `dest` in one rename, whatever was there (a file or an older link)."""
    tmp = path.with_name(f"..tmp_{path.name}_{secrets.token_hex(3)}")
    os.symlink(dest, tmp)
    os.replace(tmp, path)


class Target:
    """The directory slurmctld reads. `checkpoint(step)` runs between steps (tests crash there)."""

    def __init__(self, path: Path, checkpoint: Callable[[str], None] | None = None) -> None:
        self.path = path
        self._checkpoint = checkpoint or (lambda step: None)

    def read(self, max_bytes: int) -> FileSet:
        """What a reader of the target sees now (through the links)."""
        entries, problems = read_source(self.path, max_bytes)
        return FileSet.build(entries, problems)

    def _current_gen(self) -> str | None:
        try:
            gen = os.readlink(self.path / CURRENT)
        except OSError:
            return None
        return gen if (self.path / gen).is_dir() else None

    def swap(self, files: FileSet, generation: int) -> None:
        gen = f"{GEN_PREFIX}{generation:08d}_{secrets.token_hex(3)}"
        tmp = self.path / f"..tmp{gen}"
        write_files(tmp, files)
        os.rename(tmp, self.path / gen)
        self._checkpoint("written")
        _replace_symlink(self.path / CURRENT, gen)
        _fsync_dir(self.path)
        self._checkpoint("swapped")
        self._link(set(files.files))
        self._checkpoint("linked")
        self._prune(set(files.files), keep=gen)
        _fsync_dir(self.path)
        log.info("target_swapped", generation=generation, sha256=files.short, files=sorted(files.files))

    def _link(self, names: set[str]) -> None:
        for name in sorted(names):
            path = self.path / name
            with contextlib.suppress(OSError):
                if os.readlink(path) == LINK_PREFIX + name:
                    continue
            if path.is_dir() and not path.is_symlink():
                raise OSError(f"{path} is a directory; cannot place {name} there")
            _replace_symlink(path, LINK_PREFIX + name)

    def _prune(self, names: set[str], keep: str) -> None:
        for entry in os.listdir(self.path):
            path = self.path / entry
            if entry.startswith((GEN_PREFIX, "..tmp")) and entry != keep:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
                continue
            if entry.startswith(".."):
                continue
            with contextlib.suppress(OSError):
                if os.readlink(path).startswith(LINK_PREFIX) and entry not in names:
                    path.unlink()

    def recover(self) -> None:
        """After a crash: make the links match the generation `..current` names; drop half-written ones.
        A target that does not exist yet (a fresh emptyDir's subdirectory) is made here."""
        self.path.mkdir(mode=0o755, exist_ok=True)
        gen = self._current_gen()
        if gen is None:
            self._prune(set(), keep="")  # nothing swapped in yet: only leftovers to clear
            return
        names = {n for n in os.listdir(self.path / gen) if not n.startswith("..")}
        self._link(names)
        self._prune(names, keep=gen)
        _fsync_dir(self.path)


@dataclass(frozen=True, slots=True)
class Applied:
    generation: int
    at: str  # RFC 3339
    files: FileSet


class LastKnownGood:
    """The last set slurmctld accepted, in one JSON file under --state-dir (mode 0600: keys inside)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "last-known-good.json"

    def load(self) -> Applied | None:
        try:
            raw = json.loads(self.path.read_text())
            entries = [
                FileEntry(
                    f["name"], base64.b64decode(f["data"]), int(f["mode"]), int(f["size"]), Path(f["source"])
                )
                for f in raw["files"]
            ]
            files = FileSet.build(entries)
            if files.sha256 != raw["sha256"]:
                log.error("last_known_good_corrupt", path=str(self.path))
                return None
            return Applied(int(raw["generation"]), str(raw["at"]), files)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("last_known_good_unreadable", path=str(self.path), error=str(exc))
            return None

    def save(self, applied: Applied) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        body = {
            "generation": applied.generation,
            "at": applied.at,
            "sha256": applied.files.sha256,
            "files": [
                {
                    "name": e.name,
                    "mode": e.mode,
                    "size": e.size,
                    "source": str(e.source),
                    "data": base64.b64encode(e.data).decode(),
                }
                for e in applied.files.files.values()
            ],
        }
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(3)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(fd, json.dumps(body).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
