"""The worker pods, kept current by list + watch; and which Slurm node each pod is by its own
fields (the rule in kube.nodename, shared with the agents).

Mapping (Slinky's): a worker pod's `spec.hostname` is its Slurm node name; without one, the pod
name. `--node-label` names a pod label to use instead, for layouts where neither holds.
"""

from __future__ import annotations

import asyncio

import structlog

from sidecars.kube import KubeClient, KubeError, Pod
from sidecars.kube.nodename import NodeNaming, slurm_node_name

log = structlog.get_logger(__name__)


def node_name(pod: Pod, label: str = "") -> str:
    named = slurm_node_name(
        NodeNaming("pod", label), pod_name=pod.name, pod_hostname=pod.hostname, pod_labels=pod.labels
    )
    return named.name or ""


class PodCache:
    def __init__(self, kube: KubeClient, namespace: str, selector: str, *, watch_seconds: int = 300) -> None:
        self._kube = kube
        self._namespace = namespace
        self._selector = selector
        self._watch_seconds = watch_seconds
        self.pods: dict[str, Pod] = {}
        self.synced = asyncio.Event()

    async def run(self) -> None:
        """List, then watch from the list's version; list again after a 410 or any failure."""
        delay = 0.5
        while True:
            try:
                pods, rv = await self._kube.list_pods(self._namespace, self._selector)
                self.pods = {p.name: p for p in pods}
                self.synced.set()
                delay = 0.5
                while True:
                    async for kind, pod in self._kube.watch_pods(
                        self._namespace, self._selector, rv, self._watch_seconds
                    ):
                        rv = pod.resource_version or rv
                        if kind == "DELETED":
                            self.pods.pop(pod.name, None)
                        else:
                            self.pods[pod.name] = pod
            except KubeError as exc:
                if exc.status != 410:
                    log.warning("pod_watch_failed", status=exc.status, reason=exc.reason)
            except Exception as exc:  # connection reset, malformed stream: list again after a pause
                log.warning("pod_watch_failed", error=str(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
