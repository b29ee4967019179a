"""A Slurm daemon's last words: the line that says why it ended, read from the end of its log (or
its stderr, or a container's termination message), and the time Slurm stamped on it.

Slurm writes `fatal: ...` just before it exits (`error: ...` where a failure ends it without one,
as a failed slurmdbd conversion does), each line stamped `[2026-12-06T04:19:50.123]` in the
daemon's local time. The line quoted is bounded and redacted (a fatal may quote a config line)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sidecars.runtime.redact import redact

WORDS_CHARS = 300  # one line on a page, in an Event's message and in `upgrade status`
FATAL_CAUSE_LINES = 3  # how far before a fatal its cause's `error:` line is looked for
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?)\]\s*")
_FATAL, _ERROR = re.compile(r"\bfatal:"), re.compile(r"\berror:")


@dataclass(frozen=True, slots=True)
class LastWords:
    line: str  # the line, its stamp left out, bounded and redacted ("" when it said nothing)
    logged_at: float | None  # epoch seconds of Slurm's own stamp on it (None: no stamp)


def last_words(text: str) -> LastWords:
    """The last `fatal:` line of `text` (after the `error:` line just before it, if any); else
    its last two `error:` lines (a daemon that ends without a fatal says the cause, then that it
    failed: `error: cannot create proctrack context for proctrack/nosuch; error: slurmd
    initialization failed`); else its last line. At most WORDS_CHARS: the last line kept whole
    where it fits, the one before it cut."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    fatal = next((i for i in range(len(lines) - 1, -1, -1) if _FATAL.search(lines[i])), None)
    chosen = []
    if fatal is not None:
        # the error just before it says the cause where the fatal says only what failed
        # (`error: ... line 40: NoSuchSetting=1`, then `fatal: Unable to process configuration file`)
        cause = [line for line in lines[max(fatal - FATAL_CAUSE_LINES, 0) : fatal] if _ERROR.search(line)]
        chosen = [*cause[-1:], lines[fatal]]
    chosen = chosen or [line for line in lines if _ERROR.search(line)][-2:]
    chosen = chosen or lines[-1:]
    at = None
    said = []
    for line in chosen:
        stamp = _STAMP.match(line)
        if stamp is None:
            said.append(line)
            continue
        said.append(line[stamp.end() :])
        try:
            at = datetime.fromisoformat(stamp[1]).timestamp()  # naive: local time, as Slurm wrote it
        except ValueError:
            at = None
    said = [redact(line) for line in said]
    if len(said) > 1 and len("; ".join(said)) > WORDS_CHARS and len(said[-1]) < WORDS_CHARS // 2:
        room = WORDS_CHARS - len(said[-1]) - len("...; ")
        said = [said[0][:room] + "...", said[-1]]
    words = "; ".join(said)
    if len(words) > WORDS_CHARS:
        words = words[: WORDS_CHARS - 3] + "..."
    return LastWords(words, at)


class DaemonExited(Exception):
    """A daemon just started ended (seen within a poll of its process, pod or log), with its last
    words and when it ended: Slurm's stamp on its last line, else when its end was seen."""

    def __init__(self, daemon: str, words: str, died_at: float, how: str = "exited at start") -> None:
        said = words or "it said nothing"
        super().__init__(f"{daemon} {how}: {said}")
        self.daemon, self.words, self.died_at = daemon, words, died_at
