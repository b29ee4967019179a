"""What a restarted slurmdbd says in its log when it will not run on its file for a reason that
waiting cannot change: the database refused its credentials at its start (MySQL/MariaDB 1044,
1045, 1698, then "The database must be up when starting"), or a `fatal:` line (slurmdbd exits;
its container starts it again on the same file, to the same end).

Such a slurmdbd answers nothing, and before this the change was judged only once the whole restart
timeout had passed. Its log is read where the running (verified) set's LogFile is readable from
here (a host, a dev cluster, a log volume both containers mount); where it is not, the timeout
remains the judge. A database that is away (2002, 2003, 2013) is no refusal: slurmdbd retries it
every 5 s by itself and the change waits for it (apply.py).

Only the bytes written since `mark()` (set once the previous slurmdbd is gone) are read, at most
READ_BYTES a poll, each poll from where the last one ended: a flood of lines costs one bounded read
per poll. A quoted file line (a parse error quotes the StoragePass line as any other) is cut.
"""

from __future__ import annotations

import re
from pathlib import Path

from sidecars.runtime import files
from sidecars.slurm.dbd_throwaway import MAX_SAID, QUOTED_LINE

# a refused login counts only as a start's, which slurmdbd follows with the line below: a slurmdbd
# that was told to stop after a password rotation logs the same refusal on its way out ("unable to
# re-connect"), and its last lines may land after it stopped answering
REFUSED = re.compile(
    r"\bfatal: .*"
    r"|\b(error: mysql_real_connect failed: (?:1044|1045|1698)\b.*)\n.*The database must be up when starting"
)
READ_BYTES = 256 * 1024
MAX_LINES = 3


class StartLog:
    """slurmdbd's refusals in its LogFile since `mark()`; nothing when there is no log to read."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = 0 if self.path is None else files.size_of(self.path)

    def refusal(self) -> str | None:
        """slurmdbd's own words for a refusal written since the mark (the distinct lines, without
        their time stamps), or None."""
        # a new file in its place (rotated) is read from its start: all of it is new
        read = None if self.path is None else files.read_since(self.path, self.offset, READ_BYTES)
        if read is None:
            return None
        chunk, self.offset = read
        end = chunk.rfind(b"\n") + 1  # a line still being written is read whole at the next poll
        if end == 0 and len(chunk) < READ_BYTES:
            return None
        end = end or len(chunk)
        # the last whole line is read again next time: the line that makes it a refusal may follow
        last = chunk.rfind(b"\n", 0, end - 1) + 1
        self.offset += end if len(chunk) == READ_BYTES else last
        found: list[str] = []
        for m in REFUSED.finditer(chunk[:end].decode("utf-8", "replace")):
            line = QUOTED_LINE.sub(r"\1", (m.group(1) or m.group(0)).strip())
            if line not in found:
                found.append(line)
        return "; ".join(found[:MAX_LINES])[:MAX_SAID] if found else None
