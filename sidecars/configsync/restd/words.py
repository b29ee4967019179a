"""What slurmrestd's container said since a restart, read from the file it writes slurmrestd's output
to (`--restd-log-file`): config-sync shares slurmrestd's pod, not its processes, so a slurmrestd that
refuses to start is known by its words, not its exit. slurmrestd ends on its first `fatal:` line
(measured on 24.11 and 26.05: a SlurmUser it runs as, or shares a group with, is refused only
there, after the parse `scontrol` does: "fatal: slurmrestd should not be run as SlurmUser").

The container appends to the file, and writes STARTING before each slurmrestd it starts: one seen
after the mark is a slurmrestd started since, on the set staged before the mark (a late one is
waited for, not rolled back). Only what was written after the mark is read (from the start of a file
found shorter than the mark: started anew), at most MAX_BYTES of it; only the error and fatal lines
are said, capped."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sidecars.runtime import files

# the line slurmrestd's container writes before it starts slurmrestd (manifests/overlays/restapi)
STARTING = "slurmrestd-container: starting slurmrestd"
MAX_BYTES = 256 * 1024  # far beyond a start's output; the rest is not read
MAX_WORDS = 400  # what /status and the Event carry of it
FATAL = "fatal:"
# "[2026-12-06T16:58:30.255] error: ..." or "slurmrestd: fatal: ...": the prefix is not said
_PREFIX = re.compile(r"^(\[[^\]]*\]\s*|slurmrestd:\s*)+")
_SAID = ("error:", FATAL)


@dataclass(frozen=True, slots=True)
class Since:
    started: bool  # the container started a slurmrestd after the mark
    refused: str | None  # its words when it ended on a fatal line, else None


def mark(path: Path | None) -> int:
    """Where the file ends now (0: no file; blocking: call it off the event loop)."""
    return 0 if path is None else files.size_of(path)


def since(path: Path | None, mark: int) -> Since:
    """What the container wrote after `mark` (blocking: call it off the event loop). The file is
    in a volume slurmrestd's container writes: a link or a FIFO put there is not read (files.py)."""
    read = None if path is None else files.read_since(path, mark, MAX_BYTES)
    if read is None:
        return Since(False, None)
    text = read[0].decode(errors="replace")
    lines = [_PREFIX.sub("", line.strip()) for line in text.splitlines()]
    started = any(line == STARTING for line in lines)
    said = [line for line in lines if line.startswith(_SAID)]
    fatal = [i for i, line in enumerate(said) if line.startswith(FATAL)]
    if not fatal:
        return Since(started, None)
    # the last fatal, and the errors just before it (its reason, where the fatal line is generic)
    end = fatal[-1]
    return Since(started, "; ".join(said[max(0, end - 2) : end + 1])[:MAX_WORDS])
