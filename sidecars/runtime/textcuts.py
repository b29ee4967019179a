"""A long text cut into pieces before a C call reads it. A regular expression or `str` method runs
over its whole input in one call, holding the interpreter lock throughout: in a worker thread, a
call over a MiB line holds the event loop for as long (a split of `K= ` * 350,000 into its words:
37-83 ms). Cut in pieces, each call reads at most `CUT_CHARS`, and the loop gets its turn between
two."""

from __future__ import annotations

import re

CUT_CHARS = 64 * 1024  # one C call's input: well under a millisecond of work


def split_runs(text: str, sep: re.Pattern[str], cut_chars: int = CUT_CHARS) -> list[str]:
    """`sep.split(text)` without its empty strings, each call over one piece of `cut_chars`: a word
    a cut runs through is joined from its parts (a MiB word with no separator is 16 calls, then one
    join). `sep` matches runs of separator characters (`[ \t]+`), so a cut through a run of them
    leaves separators on both sides and changes nothing; searching for the next separator instead
    would read on, in one call, through a word as long as the text (50 ms for a MiB)."""
    out: list[str] = []
    running: list[str] = []  # the parts of the word the last cut ran through
    for start in range(0, len(text), cut_chars):
        parts = sep.split(text[start : start + cut_chars])
        running.append(parts[0])
        if len(parts) == 1:
            continue  # no separator in this piece: the word runs on
        word = "".join(running)
        if word:
            out.append(word)
        out += [w for w in parts[1:-1] if w]
        running = [parts[-1]]
    word = "".join(running)
    if word:
        out.append(word)
    return out


def find_unescaped(text: str, char: str, escape: str = "\\") -> int:
    """The index of the first `char` not right after `escape` (`(?<!\\)#` as a search would find
    it), or -1; by `str.find`, which scans a MiB in well under a millisecond."""
    i = text.find(char)
    while i > 0 and text[i - 1] == escape:
        i = text.find(char, i + 1)
    return i
