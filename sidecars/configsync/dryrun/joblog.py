"""What the throwaway's log says it did to jobs while it loaded the state ("Invalid partition (p2) for
JobId=7"): read from its whole log, line by line as it grows (one line per recovered job at 10,000
jobs, so the common line is let go first, cheaply)."""

from __future__ import annotations

import re
from collections.abc import Iterable

_JOB_LINE = re.compile(r"JobId=(\d+)")
_JOB_HARM = re.compile(r"\berror\b|invalid|kill|requeue|cancel|vanished|fail", re.IGNORECASE)
_JOB_BENIGN = re.compile(r"^Recovered JobId|Purged files for defunct", re.IGNORECASE)


def _bare(raw: str) -> str:
    return raw.split("] ", 1)[-1].removeprefix("slurmctld: ").strip()


def job_line(raw: str) -> bool:
    """A log line that says something was done to a job (what the follower keeps of the whole log)."""
    line = _bare(raw)
    return "JobId=" in line and not _JOB_BENIGN.search(line) and bool(_JOB_HARM.search(line))


def job_effects(lines: Iterable[str]) -> dict[int, str]:
    """Jobs the throwaway's log says it found invalid, killed or requeued while loading the state."""
    out: dict[int, str] = {}
    for raw in lines:
        if not job_line(raw):
            continue
        line = _bare(raw)
        for m in _JOB_LINE.finditer(line):
            out.setdefault(int(m[1]), line[:200])
    return out
