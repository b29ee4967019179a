"""Where a role reports what it did: the protocol every role depends on, and the log as its plainest form.

The Kubernetes form (an Event on the role's own pod) and the wiring that picks it live in `sidecars.kube`.
"""

from __future__ import annotations

from typing import Literal, Protocol

import structlog

from sidecars.protocol.events import Reason
from sidecars.runtime import limits
from sidecars.runtime.redact import Redactor

EventType = Literal["Normal", "Warning"]


class EventSink(Protocol):
    async def emit(self, reason: Reason, message: str, type: EventType = "Normal") -> None:
        """Report one event (its reason from sidecars.protocol.events). Never raises."""


class LogEventSink:
    """Events as structured log lines: outside Kubernetes, or when its API is unreachable."""

    def __init__(self) -> None:
        self._log = structlog.get_logger("sidecars.events")

    async def emit(self, reason: Reason, message: str, type: EventType = "Normal") -> None:
        level = self._log.warning if type == "Warning" else self._log.info
        level("event", reason=reason, message=message, event_type=type)


class RedactingEventSink:
    """Another sink's events with secret values out of their messages (runtime.redact): a
    rejection's reason may quote the config line that holds a password."""

    def __init__(self, inner: EventSink, redactor: Redactor) -> None:
        self.inner = inner
        self.redactor = redactor

    async def emit(self, reason: Reason, message: str, type: EventType = "Normal") -> None:
        await self.inner.emit(reason, self.redactor.text(message, limits.EVENT_MESSAGE_CHARS), type)
