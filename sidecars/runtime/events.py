"""Where a role reports what it did: a Kubernetes Event on its pod when in a cluster, else the log.

Roles depend on this protocol only; the Kubernetes implementation lives behind `sidecars.kube`.
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
