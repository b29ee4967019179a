"""The secret values config-sync has read, so that no text it shows can quote one (runtime.redact).

Learnt from the sources whenever their files change: the values of secret-named options in every
text file, and every value and line of the files of a Secret volume. Values once learnt are kept
(bounded): a message may quote the password a change replaced ("still 'old' (file says 'new')").
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import structlog

from sidecars.configsync.fileset.sources import FileEntry, SourceChanged, read_sources
from sidecars.runtime.redact import MIN_VALUE, PAIR, secret_pairs

log = structlog.get_logger(__name__)

MAX_VALUES = 4096
MIN_LINE = 8  # a Secret file's whole lines are scrubbed from this length on


def _fingerprint(sources: Iterable[Path]) -> tuple[tuple[str, int, int, int], ...]:
    seen: list[tuple[str, int, int, int]] = []
    for source in sources:
        try:
            names = sorted(os.listdir(source))
        except OSError:
            continue
        for name in names:
            try:
                st = os.stat(source / name)
            except OSError:
                continue
            seen.append((f"{source}/{name}", st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(seen)


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
    """Call it for the values learnt so far (the sources re-read first when their files changed)."""

    def __init__(self, sources: tuple[Path, ...], secret_sources: tuple[Path, ...], max_bytes: int) -> None:
        self._sources = sources
        self._secret = frozenset(secret_sources)
        self._max_bytes = max_bytes
        self._seen: tuple[tuple[str, int, int, int], ...] | None = None
        self._values: dict[str, None] = {}  # insertion-ordered: the oldest go first past the bound
        self._answer: tuple[str, ...] = ()  # the same object until the values change (a Redactor
        # sorts them once per answer, not at every log line)

    def __call__(self) -> Iterable[str]:
        fingerprint = _fingerprint(self._sources)
        if fingerprint != self._seen:
            try:
                files = read_sources(self._sources, self._max_bytes)
            except (OSError, SourceChanged) as exc:  # the next call reads again
                log.warning("secret_values_unread", error=str(exc))
            else:
                self._seen = fingerprint
                for entry in files.files.values():
                    for value in values_of(entry, whole=entry.secret or entry.source in self._secret):
                        if len(value) >= MIN_VALUE:
                            self._values.pop(value, None)
                            self._values[value] = None
                while len(self._values) > MAX_VALUES:
                    del self._values[next(iter(self._values))]
                if tuple(self._values) != self._answer:
                    self._answer = tuple(self._values)
        return self._answer
