"""Replacing a small file atomically, through a temporary name nobody can guess or pre-create."""

from __future__ import annotations

import contextlib
import os
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
