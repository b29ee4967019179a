"""Is a path safe from the uids we do not trust (a job's user)?

A path is trusted when nobody but root or our own user can change what it names: every directory
from `/` down is owned by a trusted uid and writable by no one else (a trusted group may write;
a sticky world-writable directory such as /tmp is fine on the way, as long as the entry below it is
ours, since the sticky bit stops others renaming it). A read-only mount is no excuse: another
container may mount the same volume read-write, so owner and mode decide. A symlink is followed
only when the directory holding it is trusted (then its target is checked the same way), so a job
can neither plant one nor redirect one. The kubelet makes every emptyDir 0777 without the sticky
bit: such a directory fails this check until an init step fixes it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MAX_LINKS = 40  # as the kernel's own limit on symlinks in one lookup


class UntrustedPath(ValueError):
    """The path could be changed by an untrusted uid; the message says which part and why."""


@dataclass(frozen=True, slots=True)
class Trust:
    """Who may own and write what we read: root and the given uids and gids."""

    uids: frozenset[int]
    gids: frozenset[int]

    @classmethod
    def ours(cls, extra_uids: Iterable[int] = (), extra_gids: Iterable[int] = ()) -> Trust:
        """Root, this process's effective uid and gid, and any given (the SlurmUser's)."""
        return cls(
            frozenset({0, os.geteuid(), *extra_uids}),
            frozenset({0, os.getegid(), *extra_gids}),
        )

    def _dir_problem(self, path: str, st: os.stat_result, below_sticky_ok: bool) -> str | None:
        if st.st_uid not in self.uids:
            return f"{path} is owned by uid {st.st_uid}"
        mode = st.st_mode
        sticky_ok = below_sticky_ok and bool(mode & stat.S_ISVTX)
        if mode & stat.S_IWOTH and not sticky_ok:
            return f"{path} is writable by every user (mode {stat.S_IMODE(mode):04o})"
        if mode & stat.S_IWGRP and st.st_gid not in self.gids and not sticky_ok:
            return f"{path} is writable by group {st.st_gid} (mode {stat.S_IMODE(mode):04o})"
        return None

    def check_dir(self, path: Path | str) -> Path:
        """The real path of directory `path`, when it and every directory above it are trusted and
        none of it is writable by others; raises UntrustedPath otherwise."""
        real = self._walk(Path(path))
        if not stat.S_ISDIR(os.stat(real).st_mode):
            raise UntrustedPath(f"{path} is not a directory")
        return real

    def check_file(self, path: Path | str, kinds: frozenset[int] = frozenset({stat.S_IFREG})) -> Path:
        """The real path of `path` (a file, or a socket with kinds={S_IFSOCK}), when its directory is
        trusted (check_dir) and the file is owned by a trusted uid and writable by no one else."""
        p = Path(path)
        real_dir = self.check_dir(p.parent)
        target = self._walk(real_dir / p.name, is_leaf=True)
        st = os.lstat(target)
        if stat.S_IFMT(st.st_mode) not in kinds:
            raise UntrustedPath(f"{path} is not a {' or '.join(_KIND_NAMES[k] for k in sorted(kinds))}")
        if st.st_uid not in self.uids:
            raise UntrustedPath(f"{path} is owned by uid {st.st_uid}")
        others_write = st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid not in self.gids)
        if stat.S_IFMT(st.st_mode) == stat.S_IFREG and others_write:
            raise UntrustedPath(f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})")
        return target

    def _walk(self, path: Path, is_leaf: bool = False) -> Path:
        """Resolve `path` one component at a time, checking each directory before trusting what it
        names; returns the real path. The last component is not checked as a directory when `is_leaf`.
        A sticky world-writable directory passes on the way, never as the last one: there, others
        could plant the names we are about to make."""
        todo = list(Path(os.path.abspath(path)).parts[1:])
        current = Path("/")
        links = 0
        st = _lstat(current)
        parent_sticky = False
        problem = self._dir_problem("/", st, below_sticky_ok=False)
        if problem:
            raise UntrustedPath(problem)
        while todo:
            name = todo.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                current = current.parent
                parent_sticky = _sticky(_lstat(current))
                continue
            nxt = current / name
            st = _lstat(nxt)
            if parent_sticky and st.st_uid not in self.uids:
                # a sticky directory protects only what trusted uids own in it
                raise UntrustedPath(f"{nxt} is owned by uid {st.st_uid} in a directory all may write")
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > MAX_LINKS:
                    raise UntrustedPath(f"{path}: too many symlinks")
                target = Path(os.readlink(nxt))
                # the directory holding the link is trusted: where it points was chosen by a trusted uid
                todo = [*(target.parts[1:] if target.is_absolute() else target.parts), *todo]
                if target.is_absolute():
                    current, parent_sticky = Path("/"), False
                continue
            last = not todo
            if last and is_leaf:
                return nxt
            if not stat.S_ISDIR(st.st_mode):
                raise UntrustedPath(f"{nxt} is not a directory")
            problem = self._dir_problem(str(nxt), st, below_sticky_ok=not last)
            if problem:
                raise UntrustedPath(problem)
            parent_sticky = _sticky(st)
            current = nxt
        return current


_KIND_NAMES = {stat.S_IFREG: "regular file", stat.S_IFSOCK: "socket", stat.S_IFDIR: "directory"}


def _lstat(path: Path) -> os.stat_result:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        raise UntrustedPath(f"{path} does not exist") from None
    except OSError as exc:
        raise UntrustedPath(f"{path}: {exc.strerror}") from None


def _sticky(st: os.stat_result) -> bool:
    """World-writable with the sticky bit (/tmp): others may add names, not take ours."""
    return bool(st.st_mode & stat.S_ISVTX and st.st_mode & stat.S_IWOTH)
