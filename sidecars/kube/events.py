"""`EventSink` as Kubernetes Events on one object (a role's own pod), falling back to the log."""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from sidecars.kube.client import KubeClient
from sidecars.runtime.events import EventType, LogEventSink

log = structlog.get_logger(__name__)


class KubeEventSink:
    """Events about `involved` ({kind, name, namespace, uid?}); an API failure is logged, never raised."""

    def __init__(
        self, kube: KubeClient, namespace: str, involved: Mapping[str, str], component: str = "slurm-sidecars"
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._involved = dict(involved)
        self._component = component
        self._fallback = LogEventSink()

    async def emit(self, reason: str, message: str, type: EventType = "Normal") -> None:
        await self._fallback.emit(reason, message, type)  # the log always has it too
        try:
            await self._kube.create_event(
                self._namespace, self._involved, reason, message, type=type, component=self._component
            )
        except Exception as exc:  # reporting must never take the role down
            log.warning("kube_event_failed", reason=reason, error=str(exc))
