"""The Kubernetes Nodes, kept current by one list + watch (cluster-scoped) for the whole control
plane: maintenance windows read their annotations, cordon sync their schedulability, pod naming
(--node-name-from=kube-node) their names and annotations. One cache, so the API server sees one
list and one watch however many features read Nodes."""

from __future__ import annotations

from sidecars.kube import KubeClient, KubeNode
from sidecars.kube.cache import WatchCache


class NodeCache(WatchCache[KubeNode]):
    def __init__(self, kube: KubeClient, *, watch_seconds: int = 300) -> None:
        # looked up at each call, not here: a stand-in client (the benchmarks') may have no list
        super().__init__(
            lambda: kube.list_nodes(),  # noqa: PLW0108
            lambda rv: kube.watch_nodes(rv, watch_seconds),
            lambda n: n.name,
            lambda n: n.resource_version,
            failed_event="node_watch_failed",
            silence_seconds=kube.watch_silence_seconds,
        )

    @property
    def nodes(self) -> dict[str, KubeNode]:
        return self.items
