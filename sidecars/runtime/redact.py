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
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any

REDACTED = "<redacted>"
SECRET_KEY = re.compile(r"pass|key|secret|token|credential|jwt|authaltparameters", re.IGNORECASE)
# `Key=value`, `Key = value`, `Key="a quoted value"` (an unterminated quote runs to the line's end)
PAIR = re.compile(r"""(?P<key>[A-Za-z][A-Za-z0-9_.-]*)(?P<sep>[ \t]*=[ \t]*)(?P<value>"[^"\n]*"?|\S+)""")
MIN_VALUE = 4  # a shorter known value ("no", "1") is too common to scrub from every text
BOUND = "_redactor"  # the structlog context key a daemon binds its Redactor under
# values that describe a form, not a secret (our checks say "'x' is not Key=Value")
PLACEHOLDERS = frozenset({"Value", "value", "VALUE", "...", REDACTED})


def _hide(match: re.Match[str]) -> str:
    key = match["key"]
    if not SECRET_KEY.search(key) or match["value"] in PLACEHOLDERS:
        return match[0]
    return f"{key}{match['sep']}{REDACTED}"


def redact(text: str) -> str:
    """`text` with the value of every secret-named `Key=value` pair replaced."""
    if "=" not in text:
        return text
    return PAIR.sub(_hide, text)


def secret_pairs(text: str) -> Iterable[str]:
    """The values of the secret-named `Key=value` pairs in a config text (quotes dropped)."""
    for m in PAIR.finditer(text):
        if SECRET_KEY.search(m["key"]):
            yield m["value"].strip('"')


class Redactor:
    """Both rules: the pattern, and the values `known()` returns (asked at every use)."""

    def __init__(self, known: Callable[[], Iterable[str]] = tuple) -> None:
        self._known = known

    def text(self, text: str) -> str:
        out = redact(text)
        for value in sorted({v for v in self._known() if len(v) >= MIN_VALUE}, key=len, reverse=True):
            if value in out:
                out = out.replace(value, REDACTED)
        return out

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
    (`BOUND`), else by the pattern alone."""
    bound = event.pop(BOUND, None)
    scrub = bound.text if isinstance(bound, Redactor) else redact
    for key, value in event.items():
        if isinstance(value, str):
            event[key] = scrub(value)
    return event
