"""Where a role reports what it did: the protocol every role depends on, and the log as its plainest form.

The Kubernetes form (an Event on the role's own pod) and the wiring that picks it live in `sidecars.kube`.
"""

from __future__ import annotations

from typing import Literal, Protocol

import structlog

EventType = Literal["Normal", "Warning"]


class EventSink(Protocol):
    async def emit(self, reason: str, message: str, type: EventType = "Normal") -> None:
        """Report one event (reason: CamelCase, e.g. `ConfigRejected`). Never raises."""


class LogEventSink:
    """Events as structured log lines: outside Kubernetes, or when its API is unreachable."""

    def __init__(self) -> None:
        self._log = structlog.get_logger("sidecars.events")

    async def emit(self, reason: str, message: str, type: EventType = "Normal") -> None:
        level = self._log.warning if type == "Warning" else self._log.info
        level("event", reason=reason, message=message, event_type=type)
