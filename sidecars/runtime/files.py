"""Replacing a small file atomically, through a temporary name nobody can guess or pre-create; and
reading what a daemon appended to its log since a mark, without trusting what stands at its path."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

TEMP_PREFIX = ".tmp-"  # what a directory's cleaner may remove as a write cut short


def replace_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `text` to `path`: readers see the old content or the new, never half. The temporary
    file is made with O_EXCL under a random name (mkstemp): a name planted in the directory
    beforehand cannot stand in for it, nor make the write fail."""
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def size_of(path: Path) -> int:
    """The size of the regular file at `path` (not followed if a link); 0 when there is none."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def read_since(path: Path, offset: int, limit: int) -> tuple[bytes, int] | None:
    """At most `limit` bytes of the regular file at `path` from `offset` (from its start when it is
    now shorter: a new file in its place), and the offset they start at; None when there is no
    such file. A daemon's log path comes from a config author, and a log in a shared volume can be
    replaced by another container: a link there is not followed (it could name a file only this
    container may read) and a FIFO is not waited on (no writer: the read would block for good).
    Blocking: call it off the event loop."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        start = offset if st.st_size >= offset else 0
        f.seek(start)
        return f.read(limit), start
