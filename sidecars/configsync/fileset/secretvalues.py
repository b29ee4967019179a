"""The secret values config-sync has read, so that no text it shows can quote one (runtime.redact).

Learnt from each set config-sync reads from its sources: the values of secret-named options in every
text file, and every value and line of the files of a Secret volume. Values once learnt are kept
(bounded): a message may quote the password a change replaced ("still 'old' (file says 'new')").
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from sidecars.configsync.fileset.sources import FileEntry, FileSet
from sidecars.runtime.redact import MIN_VALUE, PAIR, secret_pairs

MAX_VALUES = 4096
MIN_LINE = 8  # a Secret file's whole lines are scrubbed from this length on


def values_of(entry: FileEntry, whole: bool) -> Iterable[str]:
    """The secret values in one file: of secret-named options; with `whole` (a Secret's file), also
    every line that is no option (a token, a key, a password file's text). A Secret's other option
    values (`DbdHost=127.0.0.1`, `SlurmUser=slurm`) are not scrubbed from every other text: they
    are common words, and the file itself is never shown anyway."""
    try:
        text = entry.data.decode("utf-8")
    except UnicodeDecodeError:
        return
    yield from secret_pairs(text)
    if not whole:
        return
    for line in text.splitlines():
        bare = line.strip()
        if len(bare) >= MIN_LINE and not bare.startswith("#") and not _option(bare):
            yield bare


def _option(line: str) -> bool:
    # base64 padding ("...==") is no `Key=value`
    m = PAIR.match(line)
    return m is not None and not m["value"].startswith("=")


class SecretValues:
    """Call it for the values learnt so far; `learn` adds those of a set just read. It never reads the
    sources itself: it is asked at every log line, on the event loop, and a MiB read there held the
    loop 0.14 s once under load (issue 33). The service hands it each set it reads, in its reading
    thread, before anything about that set is judged or shown (service.ConfigSync._read)."""

    def __init__(self, secret_sources: tuple[Path, ...]) -> None:
        self._secret = frozenset(secret_sources)
        self._values: dict[str, None] = {}  # insertion-ordered: the oldest go first past the bound
        self._answer: tuple[str, ...] = ()  # the same object until the values change (a Redactor
        # sorts them once per answer, not at every log line)

    def learn(self, files: FileSet) -> None:
        """The secret values of `files` learnt (CPU over the whole set: off the loop). The answer is
        replaced in one assignment, so a log line on the loop meanwhile reads the old or the new."""
        values = dict(self._values)
        for entry in files.files.values():
            for value in values_of(entry, whole=entry.secret or entry.source in self._secret):
                if len(value) >= MIN_VALUE:
                    values.pop(value, None)
                    values[value] = None
        while len(values) > MAX_VALUES:
            del values[next(iter(values))]
        self._values = values
        if tuple(values) != self._answer:
            self._answer = tuple(values)

    def __call__(self) -> Iterable[str]:
        return self._answer
