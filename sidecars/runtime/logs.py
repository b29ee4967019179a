"""structlog, configured once from `main()`: JSON lines in containers, readable key=value on a terminal."""

from __future__ import annotations

import logging
import sys

import structlog


def _stderr_logger(*_: object) -> structlog.PrintLogger:
    return structlog.PrintLogger(file=sys.stderr)


def configure(*, json: bool | None = None, level: str = "info") -> None:
    """Configure structlog and the stdlib root logger (aiohttp, kubernetes-asyncio log through it)."""
    if json is None:
        json = not sys.stderr.isatty()
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
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
    logging.basicConfig(
        level=max(numeric, logging.WARNING),
        stream=sys.stderr,
        force=True,
        format="%(levelname)s %(name)s: %(message)s",
    )
