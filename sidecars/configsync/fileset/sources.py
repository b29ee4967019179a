"""Reading the source volumes into one file set, and its content hash.

A kubelet-managed volume (ConfigMap, Secret) holds a timestamped directory with the files, a `..data`
symlink to it, and one symlink per file (`name -> ..data/name`); an update writes a new timestamped
directory and renames a fresh `..data` over the old one. Reading the directory that `..data` names,
once, gives a consistent snapshot; a plain directory (compose, local use) is read as it is. Entries
whose names start with `..` are the writer's machinery and never part of the set.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

DATA_LINK = "..data"
SECRET_SUFFIXES = (".key", ".pem", ".jwt")


@dataclass(frozen=True, slots=True)
class FileEntry:
    name: str
    data: bytes  # at most max_file_bytes + 1 bytes: an oversize file is rejected, never applied
    mode: int  # permission bits as found in the source
    size: int  # the real size on disk
    source: Path

    @property
    def secret(self) -> bool:
        """Key material: contents never logged, written 0600, a change needs a restart."""
        return self.name.endswith(SECRET_SUFFIXES) or not self.mode & 0o044


@dataclass(frozen=True, slots=True)
class FileSet:
    files: Mapping[str, FileEntry]
    problems: tuple[str, ...] = ()  # found while reading (a name in two sources, an unreadable file)
    sha256: str = field(default="")

    @classmethod
    def build(cls, entries: Iterable[FileEntry], problems: Iterable[str] = ()) -> FileSet:
        files = {e.name: e for e in sorted(entries, key=lambda e: e.name)}
        problems = tuple(problems)
        sha = digest(files.values())
        if problems:  # a broken read differs from the clean set it resembles
            sha = hashlib.sha256((sha + "\0" + "\0".join(problems)).encode()).hexdigest()
        return cls(files, problems, sha)

    @property
    def short(self) -> str:
        return self.sha256[:12]


def digest(entries: Iterable[FileEntry]) -> str:
    """SHA-256 over names and contents (sizes too, so a truncated oversize read still tells changes)."""
    h = hashlib.sha256()
    for e in sorted(entries, key=lambda e: e.name):
        h.update(e.name.encode() + b"\0" + str(e.size).encode() + b"\0")
        h.update(e.data)
        h.update(b"\0")
    return h.hexdigest()


class SourceChanged(Exception):
    """The volume was swapped while being read: read it again."""


def _read_files(base: Path, source: Path, max_bytes: int) -> tuple[list[FileEntry], list[str]]:
    entries: list[FileEntry] = []
    problems: list[str] = []
    for name in sorted(os.listdir(base)):
        if name.startswith(".."):
            continue
        path = base / name
        try:
            st = os.stat(path)  # follows the per-file symlinks of a kubelet volume
        except FileNotFoundError:
            if os.path.islink(path):
                continue  # a link whose file left with the last swap: the writer removes it next
            raise
        if stat.S_ISDIR(st.st_mode):
            continue  # ConfigMap keys are flat; a subdirectory is not part of the set
        if not stat.S_ISREG(st.st_mode):
            problems.append(f"{source}/{name} is not a regular file")
            continue
        try:
            with open(path, "rb") as f:
                data = f.read(max_bytes + 1)
        except PermissionError as exc:
            problems.append(f"{source}/{name} cannot be read: {exc.strerror}")
            continue
        entries.append(FileEntry(name, data, stat.S_IMODE(st.st_mode), st.st_size, source))
    return entries, problems


def read_source(source: Path, max_bytes: int) -> tuple[list[FileEntry], list[str]]:
    """One volume's files. Raises FileNotFoundError when the directory itself is gone."""
    link = source / DATA_LINK
    for _ in range(10):
        try:
            snapshot = os.readlink(link)
        except FileNotFoundError:
            return _read_files(source, source, max_bytes)  # a plain directory
        except OSError:  # `..data` that is not a symlink: read it as a plain directory
            return _read_files(source, source, max_bytes)
        base = source / snapshot
        try:
            entries, problems = _read_files(base, source, max_bytes)
        except FileNotFoundError:
            continue  # the snapshot was removed under us by the next update
        if os.readlink(link) == snapshot:
            return entries, problems
    raise SourceChanged(f"{source} kept changing while being read")


def read_sources(sources: Iterable[Path], max_bytes: int) -> FileSet:
    """Every source merged into one set; a name found in two sources is a problem, not a choice."""
    entries: dict[str, FileEntry] = {}
    problems: list[str] = []
    for source in sources:
        found, trouble = read_source(source, max_bytes)
        problems += trouble
        for e in found:
            if e.name in entries:
                problems.append(f"{e.name} is in both {entries[e.name].source} and {e.source}")
                continue
            entries[e.name] = e
    return FileSet.build(entries.values(), problems)
