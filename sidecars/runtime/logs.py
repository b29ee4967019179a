"""structlog, configured once from `main()`: JSON lines in containers, readable key=value on a terminal.

The libraries' own records (aiohttp's access and error logs, kubernetes-asyncio's) go through the
same processors as ours (structlog's `ProcessorFormatter` on the stdlib root logger), so a
container's log is one shape of line, each carrying the context the daemon bound once (`bind`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import structlog

from sidecars.runtime import redact
from sidecars.runtime.settings import choice, declared, setting, settings_from

FORMATS = {"auto": None, "json": True, "console": False}  # --log-format: JSON lines or not


@declared()
class LogSettings:
    """The command line's own flags, before the subcommand's name: how every role logs."""

    log_level: str = setting(
        default="info", conv=choice("debug", "info", "warning", "error"), help="the least level logged"
    )
    log_format: str = setting(
        default="auto",
        conv=choice(*FORMATS),
        help="json: one JSON object a line; console: key=value; auto: json unless stderr is a terminal",
    )


def asked(args: argparse.Namespace) -> LogSettings:
    """The log settings the command line (or `SIDECARS_LOG_*`) gave, else the defaults."""
    return settings_from(LogSettings, args)


def _stderr_logger(*_: object) -> structlog.PrintLogger:
    return structlog.PrintLogger(file=sys.stderr)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler on whatever sys.stderr is at the moment of each record (test runners swap
    and close it between tests; a handler holding the first one would write to a closed file)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _: TextIO) -> None:
        pass


def configure(*, json: bool | None = None, level: str = "info") -> None:
    """Configure structlog and the stdlib root logger (aiohttp, kubernetes-asyncio log through it)."""
    if json is None:
        json = not sys.stderr.isatty()
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact.log_processor,  # a reason may quote a config line with a password in it
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # look sys.stderr up per logger, not once: test runners swap and close it between tests
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
    handler = _StderrHandler()
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            # a library's record: its logger's name says whose it is (`aiohttp.access`, ...)
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    # the libraries' chatter (every retry, every connection) only from warnings up
    root.setLevel(max(numeric, logging.WARNING))


def bind(role: str, *, env: Mapping[str, str] | None = None, **context: Any) -> None:
    """Bind the daemon's context once (role, node, pod ...) for every line it logs, its libraries'
    included; call it inside the daemon's own task, so it ends with the daemon. `pod` defaults to
    the downward API's POD_NAMESPACE/POD_NAME when both are set; None values are left out."""
    if context.get("pod") is None and env is not None and env.get("POD_NAME") and env.get("POD_NAMESPACE"):
        context["pod"] = f"{env['POD_NAMESPACE']}/{env['POD_NAME']}"
    structlog.contextvars.bind_contextvars(
        role=role, **{k: v for k, v in context.items() if v is not None and v != ""}
    )
