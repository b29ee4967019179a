"""Secret values out of every text we show.

Two rules, both applied to any text that may quote a config (a diff, Slurm's own words for a
refusal, our checks' words, a log line, an Event):

- `Key=value` pairs whose key names a secret (`*Pass*`, `*Key*`, `*Secret*`, `*Token*`, JWT
  settings: slurm.conf's `AccountingStoragePass=`, `JobCompPass=`, slurmdbd.conf's `StoragePass=`,
  acct_gather.conf's `ProfileInfluxDBPass=`, `AuthAltParameters=jwt_key=...`) keep their key (a
  reader sees what changed) and lose their value: `<redacted>`.
- The secret values themselves, wherever and however they are quoted ("jobcomppass is still
  '(null)' (file says '...')"): a `Redactor` knows the values its daemon has read (config-sync:
  `configsync.secretvalues`) and replaces each.

Whole files from a Secret volume are withheld where they are shown (config-sync's history).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any

from sidecars.runtime import limits

REDACTED = "<redacted>"
SECRET_WORDS = ("pass", "key", "secret", "token", "credential", "jwt", "authaltparameters")
SECRET_KEY = re.compile("|".join(SECRET_WORDS), re.IGNORECASE)
# `Key=value`, `Key = value`, `Key="a quoted value"` (an unterminated quote runs to the line's end).
# A match starts only where no key character stands before it (its leading non-letters, a diff's
# `-`, are passed over, possessively): without that look-behind a long run of key characters with
# no `=` is tried again from each of its characters (quadratic: one 1 MiB word held config-sync
# for minutes).
PAIR = re.compile(
    r"""(?<![A-Za-z0-9_.-])[0-9_.-]*+(?P<key>[A-Za-z][A-Za-z0-9_.-]*)(?P<sep>[ \t]*=[ \t]*)"""
    r"""(?P<value>"[^"\n]*"?|\S+)"""
)
# `scheme://user:password@host` (JobCompLoc=, a peer's URL): the password. Tried at `://` only.
URL_PASSWORD = re.compile(r"://(?P<user>[^\s:/@]*):(?P<password>[^\s/@]+)@")
MIN_VALUE = 4  # a shorter known value ("no", "1") is too common to scrub from every text
BOUND = "_redactor"  # the structlog context key a daemon binds its Redactor under
# values that describe a form, not a secret (our checks say "'x' is not Key=Value")
PLACEHOLDERS = frozenset({"Value", "value", "VALUE", "...", REDACTED})
_BLANK = " \t\r"


def _trimmed(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1] in _BLANK:
        end -= 1
    return end


def _secret_spans(text: str) -> Iterator[tuple[int, int]]:
    """The (start, end) of every secret value in `text`, in order, in one pass: a secret-named
    pair's value (a quoted one to its quote; an unquoted one to the next `Key=` of its line or the
    line's end, as `Pass=two words` has two words to hide), and a URL's password."""
    low = text.lower()
    if not any(word in low for word in SECRET_WORDS):  # no secret-named key anywhere: nothing to walk
        return
    pending: tuple[int, int] | None = None  # an unquoted secret value: its start, its line's end
    for m in PAIR.finditer(text):
        if pending is not None:
            start, line_end = pending
            yield start, _trimmed(text, start, min(line_end, m.start()))
            pending = None
        if not SECRET_KEY.search(m["key"]) or m["value"] in PLACEHOLDERS:
            continue
        start = m.start("value")
        if m["value"].startswith('"'):
            yield start, m.end("value")
            continue
        line_end = text.find("\n", start)
        pending = (start, len(text) if line_end < 0 else line_end)
    if pending is not None:
        yield pending[0], _trimmed(text, *pending)


def _url_spans(text: str) -> Iterator[tuple[int, int]]:
    for m in URL_PASSWORD.finditer(text):
        if m["password"] not in PLACEHOLDERS:
            yield m.span("password")


def _replaced(
    text: str, spans: Iterable[tuple[int, int]], limit: int | None = None, total: int | None = None
) -> str:
    """`text` with each span (sorted by start; overlaps merged) replaced by `REDACTED`; with a
    `limit`, only its first `limit` characters are kept (a span that starts before it is replaced
    whole) and the cut says how much of the `total` (the text's length before the caller cut it
    short) it left out."""
    out: list[str] = []
    at = 0
    stop = len(text) if limit is None else min(limit, len(text))
    for start, end in spans:
        if start >= stop:
            break
        if start < at:  # overlaps the span replaced last
            at = max(at, end)
            continue
        out += (text[at:start], REDACTED)
        at = end
    if at < stop:
        out.append(text[at:stop])
    if limit is not None and len(text) > limit:
        out.append(f"... ({(total or len(text)) - max(at, stop)} more characters not shown)")
    return "".join(out)


def redact(text: str) -> str:
    """`text` with the value of every secret-named `Key=value` pair and every URL's password
    replaced. Linear in the text."""
    if "=" in text:
        text = _replaced(text, _secret_spans(text))
    if "://" in text:
        text = _replaced(text, _url_spans(text))
    return text


def _pattern_spans(text: str) -> list[tuple[int, int]]:
    spans = list(_secret_spans(text)) if "=" in text else []
    return spans + list(_url_spans(text)) if "://" in text else spans


def secret_pairs(text: str) -> Iterable[str]:
    """The values of the secret-named `Key=value` pairs in a config text (quotes dropped; an
    unquoted value of several words also word by word, as Slurm reads its first), and every URL's
    password."""
    for start, end in _secret_spans(text):
        value = text[start:end]
        if value.startswith('"'):
            yield value.strip('"')
            continue
        yield value
        words = value.split()
        if len(words) > 1:
            yield from words
    for start, end in _url_spans(text):
        yield text[start:end]


class Redactor:
    """Both rules: the pattern, and the values `known()` returns (asked at every use; the values
    are sorted once per answer, so a caller that keeps handing back the same collection until its
    values change pays for that once, not at every log line)."""

    def __init__(self, known: Callable[[], Iterable[str]] = tuple) -> None:
        self._known = known
        self._seen: object = None
        self._values: tuple[str, ...] = ()

    def _scrubbed(self) -> tuple[str, ...]:
        known = self._known()
        if known is not self._seen:
            values = sorted({v for v in known if len(v) >= MIN_VALUE}, key=len, reverse=True)
            kept: list[str] = []
            total = 0
            for value in values:  # the longest first: a value inside another goes after it
                total += len(value)
                if total > limits.KNOWN_SECRET_CHARS:
                    break
                kept.append(value)
            self._seen, self._values = known, tuple(kept)
        return self._values

    def text(self, text: str, limit: int | None = None) -> str:
        """`text` redacted by both rules; with a `limit`, cut at that many characters (a secret
        the cut crosses is replaced whole). Linear in the text for each known value, and only the
        part up to the cut and one longest value beyond it is looked at."""
        values = self._scrubbed()
        total = len(text)
        if limit is not None and total > limit:
            text = text[: limit + (len(values[0]) if values else 0) + 1]
        spans = _pattern_spans(text)
        for value in values:
            at = text.find(value)
            while at >= 0:
                spans.append((at, at + len(value)))
                at = text.find(value, at + len(value))
        spans.sort()
        return _replaced(text, spans, limit, total)

    def json(self, value: Any) -> Any:
        """A JSON value with every string in it redacted (keys left as they are)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.json(v) for v in value]
        if isinstance(value, Mapping):
            return {k: self.json(v) for k, v in value.items()}
        return value


def log_processor(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog: every string value of a log line redacted, by the Redactor the daemon bound
    (`BOUND`), else by the pattern alone, and cut at `limits.LOG_FIELD_CHARS`."""
    bound = event.pop(BOUND, None)
    scrub = bound if isinstance(bound, Redactor) else Redactor()
    for key, value in event.items():
        if isinstance(value, str):
            event[key] = scrub.text(value, limits.LOG_FIELD_CHARS)
    return event
