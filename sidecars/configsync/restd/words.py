"""What slurmrestd said since a restart, read from the file its container writes its output to
(`--restd-log-file`): config-sync shares slurmrestd's pod, not its processes, so a slurmrestd that
refuses to start is known by its words, not its exit. slurmrestd ends on its first `fatal:` line
(measured on 24.11 and 26.05: a SlurmUser it runs as, or shares a group with, is refused only
there, after the parse `scontrol` does: "fatal: slurmrestd should not be run as SlurmUser").

Only what was written after the mark is read (the container may also start the file anew), at most
MAX_BYTES of it; only the error and fatal lines are said, capped."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MAX_BYTES = 256 * 1024  # far beyond a start's output; the rest is not read
MAX_WORDS = 400  # what /status and the Event carry of it
FATAL = "fatal:"
# "[2026-12-06T16:58:30.255] error: ..." or "slurmrestd: fatal: ...": the prefix is not said
_PREFIX = re.compile(r"^(\[[^\]]*\]\s*|slurmrestd:\s*)+")
_SAID = ("error:", FATAL)


@dataclass(frozen=True, slots=True)
class Mark:
    size: int  # the file's size when marked (0: none yet)
    inode: int | None  # None: no file yet


def mark(path: Path | None) -> Mark:
    """Where the file ends now (blocking: call it off the event loop)."""
    if path is None:
        return Mark(0, None)
    try:
        st = path.stat()
    except OSError:
        return Mark(0, None)
    return Mark(st.st_size, st.st_ino)


def refused(path: Path | None, since: Mark) -> str | None:
    """slurmrestd's own words when what it wrote since `since` ends it (a `fatal:` line), else None
    (blocking: call it off the event loop)."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            st = path.stat()
            # a file started anew (another inode, or shorter) is read from its start
            start = since.size if st.st_ino == since.inode and st.st_size >= since.size else 0
            f.seek(start)
            text = f.read(MAX_BYTES).decode(errors="replace")
    except OSError:
        return None
    lines = [_PREFIX.sub("", line.strip()) for line in text.splitlines()]
    said = [line for line in lines if line.startswith(_SAID)]
    if not any(line.startswith(FATAL) for line in said):
        return None
    # the last fatal, and the errors just before it (its reason, where the fatal line is generic)
    end = max(i for i, line in enumerate(said) if line.startswith(FATAL))
    return "; ".join(said[max(0, end - 2) : end + 1])[:MAX_WORDS]
