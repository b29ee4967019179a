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


class _PodEventSink:
    """Events on one pod through the Kubernetes edge, which is loaded at the first event: a healthy
    agent reports nothing, and the client costs about 35 MB of memory in every pod that loads it."""

    def __init__(self, component: str, pod: str, namespace: str) -> None:
        self._component, self._pod, self._namespace = component, pod, namespace
        self._stack = contextlib.AsyncExitStack()
        self._sink: EventSink | None = None
        self._fallback = LogEventSink()

    async def _open(self) -> EventSink:
        from sidecars.kube import KubeClient, KubeEventSink, load_configuration

        conf = await load_configuration()
        if conf is None:
            return self._fallback
        kube = await self._stack.enter_async_context(KubeClient(conf))
        involved = {"kind": "Pod", "name": self._pod, "namespace": self._namespace}
        return KubeEventSink(kube, self._namespace, involved, component=self._component)

    async def emit(self, reason: str, message: str, type: EventType = "Normal") -> None:
        if self._sink is None:
            try:
                self._sink = await self._open()
            except Exception as exc:  # reporting must never take the role down
                structlog.get_logger("sidecars.events").warning("kube_events_unavailable", error=str(exc))
                self._sink = self._fallback
        await self._sink.emit(reason, message, type)

    async def aclose(self) -> None:
        await self._stack.aclose()


@contextlib.asynccontextmanager
async def pod_events(component: str, env: Mapping[str, str] | None = None) -> AsyncIterator[EventSink]:
    """Events on this process's own pod when it runs in a Kubernetes cluster (the downward API's
    POD_NAME and POD_NAMESPACE, and a service account), else the log."""
    env = os.environ if env is None else env
    pod, namespace = env.get("POD_NAME"), env.get("POD_NAMESPACE")
    if not (pod and namespace and env.get("KUBERNETES_SERVICE_HOST")):
        yield LogEventSink()
        return
    sink = _PodEventSink(component, pod, namespace)
    try:
        yield sink
    finally:
        await sink.aclose()
