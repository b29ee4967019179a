"""Flags with environment fallbacks: every `--some-flag` may also come from `SIDECARS_SOME_FLAG`.

Each role declares its flags on an argparse parser with `flag()` and builds one frozen dataclass
from the parsed namespace; a bad value raises `ConfigError`, which `main()` turns into exit 2.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sidecars.runtime import secretcheck


class ConfigError(ValueError):
    """A bad invocation or configuration: one line saying what and why (exit 2)."""


def env_name(flag: str) -> str:
    return "SIDECARS_" + flag.lstrip("-").upper().replace("-", "_")


class _AppendReplacingDefault(argparse.Action):
    """Like `append`, but the first value given on the command line replaces the default (the
    environment's list) instead of adding to it: a flag beats its variable, for lists too."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        seen = f"_{self.dest}_given"
        current = getattr(namespace, self.dest) if getattr(namespace, seen, False) else []
        setattr(namespace, self.dest, [*current, values])
        setattr(namespace, seen, True)


def flag(
    parser: argparse.ArgumentParser,
    name: str,
    *,
    env: Mapping[str, str] | None = None,
    required: bool = False,
    default: Any = None,
    multiple: bool = False,
    **kwargs: Any,
) -> None:
    """Add `--name`, defaulting to `SIDECARS_<NAME>` from the environment (comma-separated if multiple)."""
    env = os.environ if env is None else env
    var = env_name(name)
    help_text = kwargs.pop("help", "")
    from_env = env.get(var)
    if from_env is not None:
        default = [v for v in from_env.split(",") if v] if multiple else from_env
        required = False
    if multiple:
        kwargs["action"] = _AppendReplacingDefault
    parser.add_argument(name, required=required, default=default, help=f"{help_text} [env {var}]", **kwargs)


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


def positive(
    value: Any, what: str, *, conv: Callable[[Any], float] = float, allow_zero: bool = False
) -> float:
    try:
        number = conv(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: expected a number, got {value!r}") from None
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
