"""Putting a file set into the target directory atomically, and keeping the last known good set.

The target keeps the kubelet's own trick, under names of ours so the two are never confused:

    TARGET/..sync_00000007_3fa2c1/   the files of generation 7 (modes kept, key files 0600)
    TARGET/..current -> ..sync_00000007_3fa2c1
    TARGET/slurm.conf -> ..current/slurm.conf

One rename of `..current` swaps every file at once, so a reader never sees half a set. A crash at
any step leaves `..current` naming one complete generation; `recover()` makes the per-file links
agree with it, so the target is then entirely that set. The target may be a mount point (an
emptyDir), which is why the swap happens inside it.

A set swapped in before slurmctld has proven it can run on it is unverified until the verification
ends. Before `..current` moves to it, the marker `TARGET/..unverified` names it and the good
generation, which stays on disk until then. A slurmctld that (re)starts meanwhile, through
`slurm-sidecars config-guard` in its entrypoint, finds the marker and puts the good generation back
(`restore()`), leaving `TARGET/..restored` for config-sync to report. Every step that moves
`..current` holds an flock on `TARGET/..lock`, so the guard and config-sync never interleave.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from sidecars.configsync.fileset.sources import FileEntry, FileSet, read_source
from sidecars.protocol.configsync import RestoredBy

log = structlog.get_logger(__name__)

CURRENT = "..current"
GEN_PREFIX = "..sync_"
LINK_PREFIX = CURRENT + "/"
_GEN_NAME = re.compile(r"\.\.sync_\d{8}_[0-9a-f]{6}")
MARKER = "..unverified"  # JSON: the unverified generation on disk and the good one kept beside it
RESTORED = "..restored"  # JSON: what the guard last put back (config-sync reports and removes it)
LOCK = "..lock"


@dataclass(frozen=True, slots=True)
class Unverified:
    """What the marker says: `unverified` is on disk (or about to be), `good` is the set to go back to."""

    unverified: str  # generation directory names
    good: str
    generation: int
    good_generation: int
    at: str  # RFC 3339, when the swap began


@dataclass(frozen=True, slots=True)
class Restored:
    """The guard put the good generation back over a set that was never verified."""

    restored_generation: int
    unverified_generation: int
    at: str
    by: str  # "config-guard" or "config-sync"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _generation_of(gen: str) -> int:
    try:
        return int(gen[len(GEN_PREFIX) :].split("_", 1)[0])
    except ValueError:
        return 0


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
    mode: Callable[[FileEntry], int] = target_mode,
    owner: int | None = None,
) -> None:
    """Write every file of the set into a new directory `where`, durably unless told it is scratch
    (a copy for a parse or a dry run, removed within the second: no fsync to wait for)."""
    where.mkdir(mode=0o755, parents=True)
    for e in files.files.values():
        data = transform(e.name, e.data) if transform else e.data
        path = where / e.name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode(e))
        try:
            _write_all(fd, data)
            os.fchmod(fd, mode(e))  # the umask must not widen or narrow what the source said
            if owner is not None:  # a root config-sync staging for another daemon's user (restd/sync.py)
                os.fchown(fd, owner, owner)
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


def _write_json(path: Path, body: dict[str, Any], mode: int = 0o644) -> None:
    """Replace `path` durably and at once: a reader sees the old content or the new, whole. The
    temporary name starts with `..`, which no reader of a target takes for a file of the set."""
    tmp = path.with_name(f"..tmp{path.name}_{secrets.token_hex(3)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        _write_all(fd, json.dumps(body).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise OSError(f"{path} is unreadable: {exc}") from exc
    if not isinstance(body, dict):
        raise OSError(f"{path} does not hold a JSON object")
    return body


class Target:
    """The directory slurmctld reads. `checkpoint(step)` runs between steps (tests crash there)."""

    def __init__(
        self,
        path: Path,
        checkpoint: Callable[[str], None] | None = None,
        mode: Callable[[FileEntry], int] = target_mode,
        owner: int | None = None,
    ) -> None:
        self.path = path
        self._checkpoint = checkpoint or (lambda step: None)
        self.mode = mode  # each staged file's mode (slurmrestd's: 0400, restd/sync.py)
        self.owner = owner  # None: ours

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive use of `..current` against config-guard (an flock: it ends with its process)."""
        self.path.mkdir(mode=0o755, exist_ok=True)
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def unverified(self) -> Unverified | None:
        """The marker, when a set on disk awaits its verification (OSError when it is unreadable)."""
        body = _read_json(self.path / MARKER)
        if body is None:
            return None
        try:
            marker = Unverified(**body)
        except TypeError as exc:
            raise OSError(f"{self.path / MARKER} is not a marker: {exc}") from exc
        # only a generation directory of this target, never a path elsewhere (`..current` follows it)
        for gen in (marker.unverified, marker.good):
            if not isinstance(gen, str) or not _GEN_NAME.fullmatch(gen):
                raise OSError(f"{self.path / MARKER} names {gen!r}, not a generation of {self.path}")
        return marker

    def take_restored(self) -> Restored | None:
        """What the guard put back since the last call (the record is removed once read)."""
        try:
            body = _read_json(self.path / RESTORED)
            found = Restored(**body) if body is not None else None
        except (OSError, TypeError) as exc:
            log.error("restored_record_unreadable", error=str(exc))
            found = None
        (self.path / RESTORED).unlink(missing_ok=True)
        return found

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

    def swap(self, files: FileSet, generation: int, *, unverified: bool = False) -> None:
        """Make `files` the set on disk, as `generation`. `unverified`: slurmctld has yet to prove
        it runs on it; the marker goes down first and the good generation stays (see the module)."""
        gen = f"{GEN_PREFIX}{generation:08d}_{secrets.token_hex(3)}"
        tmp = self.path / f"..tmp{gen}"
        write_files(tmp, files, mode=self.mode, owner=self.owner)
        os.rename(tmp, self.path / gen)
        self._checkpoint("written")
        with self.locked():
            good = self._current_gen()
            keep = {gen}
            if unverified and good is not None:
                marker = Unverified(gen, good, generation, _generation_of(good), _now())
                _write_json(self.path / MARKER, asdict(marker))
                keep.add(good)
            else:
                (self.path / MARKER).unlink(missing_ok=True)  # whatever was pending is replaced
            _replace_symlink(self.path / CURRENT, gen)
            _fsync_dir(self.path)
            self._checkpoint("swapped")
            self._link(set(files.files))
            self._checkpoint("linked")
            self._prune(set(files.files), keep=keep)
            _fsync_dir(self.path)
        log.info(
            "target_swapped",
            generation=generation,
            sha256=files.short,
            files=sorted(files.files),
            unverified=unverified,
        )

    def verified(self) -> bool:
        """The set the marker names passed its verification: it stays, the good one it replaced goes.
        False when it is no longer on disk: the guard put the good set back meanwhile."""
        with self.locked():
            marker = self.unverified()
            if marker is None or self._current_gen() != marker.unverified:
                return False
            (self.path / MARKER).unlink()
            _fsync_dir(self.path)
            self._prune(self._names(marker.unverified), keep={marker.unverified})
            return True

    def restore(self, by: str) -> Restored | None:
        """Put the good generation back when the marker says the set on disk was never verified;
        None when there is nothing to do. Kept as the record config-sync reports (`take_restored`).
        OSError when the marker names a good generation that is gone."""
        with self.locked():
            marker = self.unverified()
            if marker is None:
                return None
            current = self._current_gen()
            if current != marker.good:
                if not (self.path / marker.good).is_dir():
                    raise OSError(f"the last verified set ({marker.good}) is missing from {self.path}")
                _replace_symlink(self.path / CURRENT, marker.good)
                _fsync_dir(self.path)
                names = self._names(marker.good)
                self._link(names)
                self._checkpoint("restored")
                self._prune(names, keep={marker.good})
            (self.path / MARKER).unlink()
            _fsync_dir(self.path)
            restored = Restored(marker.good_generation, marker.generation, _now(), by)
            if current == marker.unverified and by != RestoredBy.CONFIG_SYNC:
                _write_json(self.path / RESTORED, asdict(restored))
            log.warning(
                "unverified_set_replaced",
                restored_generation=restored.restored_generation,
                unverified_generation=restored.unverified_generation,
                by=by,
            )
            return restored

    def _names(self, gen: str) -> set[str]:
        return {n for n in os.listdir(self.path / gen) if not n.startswith("..")}

    def _link(self, names: set[str]) -> None:
        for name in sorted(names):
            path = self.path / name
            with contextlib.suppress(OSError):
                if os.readlink(path) == LINK_PREFIX + name:
                    continue
            if path.is_dir() and not path.is_symlink():
                raise OSError(f"{path} is a directory; cannot place {name} there")
            _replace_symlink(path, LINK_PREFIX + name)

    def _prune(self, names: set[str], keep: set[str]) -> None:
        for entry in os.listdir(self.path):
            path = self.path / entry
            if entry.startswith((GEN_PREFIX, "..tmp")) and entry not in keep:
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
        with self.locked():
            gen = self._current_gen()
            if gen is None:
                self._prune(set(), keep=set())  # nothing swapped in yet: only leftovers to clear
                return
            marker = None
            with contextlib.suppress(OSError):
                marker = self.unverified()
            keep = {gen} if marker is None else {gen, marker.good, marker.unverified}
            names = self._names(gen)
            self._link(names)
            self._prune(names, keep=keep)
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
        _write_json(self.path, body, 0o600)  # keys inside
