"""The Kubernetes edge: the only package that talks to the Kubernetes API (through kubernetes-asyncio).

Its names are loaded at their first use, not when the package is imported: kubernetes-asyncio costs
about 35 MB of resident memory, and a worker agent that imports `pod_events` from here must not
carry it until it reports its first event.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sidecars.kube.client import KubeClient
    from sidecars.kube.config import load_configuration
    from sidecars.kube.connection import KubeRetry
    from sidecars.kube.errors import KubeError, LeaseConflict
    from sidecars.kube.events import KubeEventSink, pod_events
    from sidecars.kube.models import Deployment, KubeNode, LeaseRecord, Pod, ReplicaSet, TokenReview
    from sidecars.kube.workloads import JobState, KubeWorkloads, PodHealth, Workload

# the models and errors load without kubernetes-asyncio; the client and its connection load it
_MODULE = {
    "Deployment": "models",
    "ReplicaSet": "models",
    "KubeClient": "client",
    "KubeRetry": "connection",
    "KubeError": "errors",
    "KubeNode": "models",
    "LeaseConflict": "errors",
    "LeaseRecord": "models",
    "Pod": "models",
    "TokenReview": "models",
    "load_configuration": "config",
    "KubeEventSink": "events",
    "pod_events": "events",
    "JobState": "workloads",
    "KubeWorkloads": "workloads",
    "PodHealth": "workloads",
    "Workload": "workloads",
}

__all__ = [
    "Deployment",
    "JobState",
    "KubeClient",
    "KubeError",
    "KubeEventSink",
    "KubeNode",
    "KubeRetry",
    "KubeWorkloads",
    "LeaseConflict",
    "LeaseRecord",
    "Pod",
    "PodHealth",
    "ReplicaSet",
    "TokenReview",
    "Workload",
    "load_configuration",
    "pod_events",
]


def __getattr__(name: str) -> Any:
    module = _MODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
