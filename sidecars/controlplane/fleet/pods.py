"""The worker pods, kept current by list + watch; and which Slurm node each pod is by its own
fields (the rule in kube.nodename, shared with the agents).

Mapping (Slinky's): a worker pod's `spec.hostname` is its Slurm node name; without one, the pod
name. `--node-label` names a pod label to use instead, for layouts where neither holds.
"""

from __future__ import annotations

from sidecars.kube import KubeClient, Pod
from sidecars.kube.cache import WatchCache
from sidecars.kube.nodename import NodeNaming, slurm_node_name


def node_name(pod: Pod, label: str = "") -> str:
    named = slurm_node_name(
        NodeNaming("pod", label), pod_name=pod.name, pod_hostname=pod.hostname, pod_labels=pod.labels
    )
    return named.name or ""


class PodCache(WatchCache[Pod]):
    def __init__(self, kube: KubeClient, namespace: str, selector: str, *, watch_seconds: int = 300) -> None:
        super().__init__(
            lambda: kube.list_pods(namespace, selector),
            lambda rv: kube.watch_pods(namespace, selector, rv, watch_seconds),
            lambda p: p.name,
            lambda p: p.resource_version,
            failed_event="pod_watch_failed",
            silence_seconds=kube.watch_silence_seconds,
        )

    @property
    def pods(self) -> dict[str, Pod]:
        return self.items
