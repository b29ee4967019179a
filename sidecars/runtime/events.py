"""Where a role reports what it did: a Kubernetes Event on its pod when in a cluster, else the log.

Roles depend on this protocol only; the Kubernetes implementation lives behind `sidecars.kube`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping
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


@contextlib.asynccontextmanager
async def pod_events(component: str, env: Mapping[str, str] | None = None) -> AsyncIterator[EventSink]:
    """Events on this process's own pod when it runs in a Kubernetes cluster (the downward API's
    POD_NAME and POD_NAMESPACE, and a service account), else the log.

    The Kubernetes client is imported only then: it costs about 35 MB of memory in every pod."""
    env = os.environ if env is None else env
    pod, namespace = env.get("POD_NAME"), env.get("POD_NAMESPACE")
    if not (pod and namespace and env.get("KUBERNETES_SERVICE_HOST")):
        yield LogEventSink()
        return
    from sidecars.kube import KubeClient, KubeEventSink, load_configuration

    conf = await load_configuration()
    if conf is None:
        yield LogEventSink()
        return
    async with KubeClient(conf) as kube:
        yield KubeEventSink(
            kube, namespace, {"kind": "Pod", "name": pod, "namespace": namespace}, component=component
        )
