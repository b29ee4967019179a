"""The Kubernetes Nodes' schedulability, kept current by one list + watch (cluster-scoped)."""

from __future__ import annotations

import asyncio

import structlog

from sidecars.kube import KubeClient, KubeError
from sidecars.kube.nodes import NodeSchedule, list_node_schedules, watch_node_schedules

log = structlog.get_logger(__name__)


class NodeCache:
    def __init__(self, kube: KubeClient, *, watch_seconds: int = 300) -> None:
        self._kube = kube
        self._watch_seconds = watch_seconds
        self.nodes: dict[str, NodeSchedule] = {}
        self.synced = asyncio.Event()

    async def run(self) -> None:
        """List, then watch from the list's version; list again after a 410 or any failure."""
        delay = 0.5
        while True:
            try:
                nodes, rv = await list_node_schedules(self._kube)
                self.nodes = {n.name: n for n in nodes}
                self.synced.set()
                delay = 0.5
                while True:
                    async for kind, node in watch_node_schedules(self._kube, rv, self._watch_seconds):
                        rv = node.resource_version or rv
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
