"""A long text cut into pieces before a C call reads it. A regular expression or `str` method runs
over its whole input in one call, holding the interpreter lock throughout: in a worker thread, a
call over a MiB line holds the event loop for as long (a split of `K= ` * 350,000 into its words:
37-83 ms). Cut at separators, each call reads at most about `CUT_CHARS`, and the loop gets its
turn between two."""

from __future__ import annotations

import re

CUT_CHARS = 64 * 1024  # one C call's input: well under a millisecond of work


def split_runs(text: str, sep: re.Pattern[str], cut_chars: int = CUT_CHARS) -> list[str]:
    """`sep.split(text)` without its empty strings, in calls over pieces of about `cut_chars`: each
    piece ends where a separator starts, so no word is cut in two (a word longer than a piece is
    read whole). `sep` must not match the empty string."""
    out: list[str] = []
    start, n = 0, len(text)
    while start < n:
        end = start + cut_chars
        if end < n:
            m = sep.search(text, end)
            end = n if m is None else m.start()
        out += [w for w in sep.split(text[start:end]) if w]
        start = end
    return out


def find_unescaped(text: str, char: str, escape: str = "\\") -> int:
    """The index of the first `char` not right after `escape` (`(?<!\\)#` as a search would find
    it), or -1; by `str.find`, which scans a MiB in well under a millisecond."""
    i = text.find(char)
    while i > 0 and text[i - 1] == escape:
        i = text.find(char, i + 1)
    return i
