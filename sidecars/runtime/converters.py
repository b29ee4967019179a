"""How a flag's text becomes its value: each converter (`Conv`) says what it expects when the text
is wrong, as one line naming the flag (`ConfigError`, exit 2), and how a value is shown in help and
docs. Booleans are spelled `true|false` (see `sidecars.runtime.settings`)."""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sidecars.runtime import secretcheck


class ConfigError(ValueError):
    """A bad invocation or configuration: one line saying what and why (exit 2)."""


@dataclass(frozen=True, slots=True)
class Conv:
    """How a flag's text becomes its value (`parse(text, flag)`, raising ConfigError) and how a
    value is shown in help and docs; `old` maps spellings still accepted (with a warning) to the
    one to write now."""

    parse: Callable[[str, str], Any]
    show: Callable[[Any], str] = str
    metavar: str = "TEXT"
    unit: str = ""
    choices: tuple[str, ...] = ()
    old: Mapping[str, str] = field(default_factory=dict)


def _text(text: str, what: str) -> str:
    return text


def _number(kind: Callable[[str], float], zero_ok: bool, most: float | None) -> Callable[[str, str], Any]:
    def parse(text: str, what: str) -> Any:
        number = positive(text, what, conv=kind, allow_zero=zero_ok)
        if most is not None and number > most:
            raise ConfigError(f"{what}: must be <= {most:g}, got {text!r}")
        return number

    return parse


def _show_number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def seconds(*, zero_ok: bool = False) -> Conv:
    """A duration in seconds, > 0 (or >= 0)."""
    return Conv(_number(float, zero_ok, None), _show_number, "SECONDS", "s")


def number(
    kind: Callable[[str], float] = int, *, unit: str = "", zero_ok: bool = False, most: float | None = None
) -> Conv:
    """A count, size or rate: > 0 (or >= 0), at most `most`."""
    return Conv(_number(kind, zero_ok, most), _show_number, "N", unit)


def _bool(text: str, what: str) -> bool:
    if text not in ("true", "false"):
        raise ConfigError(f"{what}: true or false, got {text!r}")
    return text == "true"


BOOL = Conv(
    _bool,
    lambda v: "true" if v else "false",
    "true|false",
    choices=("true", "false"),
    old={"on": "true", "off": "false", "yes": "true", "no": "false"},
)
TEXT = Conv(_text)


def choice(*names: str, old: Mapping[str, str] | None = None) -> Conv:
    """One of `names`."""

    def parse(text: str, what: str) -> str:
        if text not in names:
            raise ConfigError(f"{what}: one of {', '.join(names)}, got {text!r}")
        return text

    return Conv(parse, str, "|".join(names), choices=names, old=old or {})


def _path(text: str, what: str) -> Path:
    if not text.strip():
        raise ConfigError(f"{what}: a path is required")
    return Path(text)


def _show_path(value: Any) -> str:
    return str(value)


PATH = Conv(_path, _show_path, "PATH")
DIR = Conv(_path, _show_path, "DIR")


def parse_addr(value: str, what: str = "--http") -> tuple[str, int]:
    """`HOST:PORT` (or `[::1]:PORT`) -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{what}: expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def http_url(value: Any, what: str) -> str:
    """An http(s) base URL, its trailing slash dropped so that a path can follow."""
    if not value or not str(value).startswith(("http://", "https://")):
        raise ConfigError(f"{what} must be an http(s) URL, got {value!r}")
    return str(value).rstrip("/")


URL = Conv(http_url, str, "URL")
ADDRESS = Conv(parse_addr, lambda a: f"{a[0]}:{a[1]}", "HOST:PORT")


def _shell_words(text: str, what: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from None


SHELL_WORDS = Conv(_shell_words, shlex.join, "CMD")


def positive(
    value: Any, what: str, *, conv: Callable[[Any], float] = float, allow_zero: bool = False
) -> float:
    try:
        number = conv(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: expected a number, got {value!r}") from None
    if math.isnan(number):  # NaN compares false with everything: it would pass every bound
        raise ConfigError(f"{what}: expected a number, got {value!r}")
    if number < 0 or (number == 0 and not allow_zero):
        raise ConfigError(f"{what}: must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return number


def read_token(path: str | None, what: str = "--token-file") -> str:
    """A bearer token from a file (a mounted Secret); never logged."""
    if not path:
        raise ConfigError(f"{what} is required")
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc.strerror}") from None
    weak = secretcheck.weakness(token.encode(), secretcheck.MIN_TOKEN_CHARS)
    if weak:
        raise ConfigError(f"{what}: the token in {path} {weak}")
    return token


TOKEN_FILE = Conv(read_token, lambda _: "", "FILE")  # the token itself, read at start: never shown
