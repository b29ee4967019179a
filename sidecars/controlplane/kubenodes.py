"""The Kubernetes Nodes, kept current by one list + watch (cluster-scoped) for the whole control
plane: maintenance windows read their annotations, cordon sync their schedulability. One cache,
so the API server sees one list and one watch however many features read Nodes."""

from __future__ import annotations

import asyncio

import structlog

from sidecars.kube import KubeClient, KubeError, KubeNode

log = structlog.get_logger(__name__)


class NodeCache:
    def __init__(self, kube: KubeClient, *, watch_seconds: int = 300) -> None:
        self._kube = kube
        self._watch_seconds = watch_seconds
        self.nodes: dict[str, KubeNode] = {}
        self.synced = asyncio.Event()

    async def run(self) -> None:
        """List, then watch from the list's version; list again after a 410 or any failure."""
        delay = 0.5
        while True:
            try:
                nodes, rv = await self._kube.list_nodes()
                self.nodes = {n.name: n for n in nodes}
                self.synced.set()
                delay = 0.5
                while True:
                    async for kind, node in self._kube.watch_nodes(rv, self._watch_seconds):
                        rv = node.resource_version or rv
                        if kind == "BOOKMARK":  # only the version to resume from
                            continue
                        if kind == "DELETED":
                            self.nodes.pop(node.name, None)
                        else:
                            self.nodes[node.name] = node
            except KubeError as exc:
                if exc.status != 410:
                    log.warning("node_watch_failed", status=exc.status, reason=exc.reason)
            except Exception as exc:  # connection reset, malformed stream: list again after a pause
                log.warning("node_watch_failed", error=str(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
