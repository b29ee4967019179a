"""The Kubernetes edge: the only module that talks to the Kubernetes API (through kubernetes-asyncio)."""

from sidecars.kube.client import KubeClient, KubeNode, LeaseConflict, LeaseRecord, Pod
from sidecars.kube.config import load_configuration
from sidecars.kube.events import KubeEventSink

__all__ = [
    "KubeClient",
    "KubeEventSink",
    "KubeNode",
    "LeaseConflict",
    "LeaseRecord",
    "Pod",
    "load_configuration",
]
