"""The Kubernetes edge: the only package that talks to the Kubernetes API (through kubernetes-asyncio).

Its names are loaded at their first use, not when the package is imported: kubernetes-asyncio costs
about 35 MB of resident memory, and a worker agent that imports `pod_events` from here must not
carry it until it reports its first event.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sidecars.kube.client import (
        Deployment,
        KubeClient,
        KubeError,
        KubeNode,
        LeaseConflict,
        LeaseRecord,
        Pod,
        ReplicaSet,
        TokenReview,
    )
    from sidecars.kube.config import load_configuration
    from sidecars.kube.events import KubeEventSink, pod_events

_MODULE = {
    "Deployment": "client",
    "ReplicaSet": "client",
    "KubeClient": "client",
    "KubeError": "client",
    "KubeNode": "client",
    "LeaseConflict": "client",
    "LeaseRecord": "client",
    "Pod": "client",
    "TokenReview": "client",
    "load_configuration": "config",
    "KubeEventSink": "events",
    "pod_events": "events",
}

__all__ = [
    "Deployment",
    "KubeClient",
    "KubeError",
    "KubeEventSink",
    "KubeNode",
    "LeaseConflict",
    "LeaseRecord",
    "Pod",
    "ReplicaSet",
    "TokenReview",
    "load_configuration",
    "pod_events",
]


def __getattr__(name: str) -> Any:
    module = _MODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
