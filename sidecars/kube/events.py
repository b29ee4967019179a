"""`EventSink` as Kubernetes Events on one object (a role's own pod), falling back to the log; and
`pod_events`, which picks that or the log for a role.

kubernetes-asyncio is loaded at a role's first event, not when this module is imported: a healthy
agent reports nothing, and the client costs about 35 MB of memory in every pod that loads it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

import structlog

from sidecars.protocol.events import Reason
from sidecars.runtime.events import EventSink, EventType, LogEventSink

if TYPE_CHECKING:
    from sidecars.kube.client import KubeClient

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

    async def emit(self, reason: Reason, message: str, type: EventType = "Normal") -> None:
        await self._fallback.emit(reason, message, type)  # the log always has it too
        try:
            await self._kube.create_event(
                self._namespace, self._involved, reason, message, type=type, component=self._component
            )
        except Exception as exc:  # reporting must never take the role down
            log.warning("kube_event_failed", reason=reason, error=str(exc))


class _PodEventSink:
    """Events on one pod, the Kubernetes client opened at the first one."""

    def __init__(self, component: str, pod: str, namespace: str) -> None:
        self._component, self._pod, self._namespace = component, pod, namespace
        self._stack = contextlib.AsyncExitStack()
        self._sink: EventSink | None = None
        self._fallback = LogEventSink()

    async def _open(self) -> EventSink:
        from sidecars.kube.client import KubeClient
        from sidecars.kube.config import load_configuration

        conf = await load_configuration()
        if conf is None:
            return self._fallback
        kube = await self._stack.enter_async_context(KubeClient(conf))
        involved = {"kind": "Pod", "name": self._pod, "namespace": self._namespace}
        return KubeEventSink(kube, self._namespace, involved, component=self._component)

    async def emit(self, reason: Reason, message: str, type: EventType = "Normal") -> None:
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
