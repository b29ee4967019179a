"""Kubernetes Nodes as the node sync reads them: cordoned or not, and their taints.

Cluster-scoped, read by list + watch (one stream for the whole fleet, so the cost follows the
changes, not the size). Calls go through `KubeClient._call`, retried as every call of this edge.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from sidecars.kube.client import KubeClient, KubeError, _error


@dataclass(frozen=True, slots=True)
class NodeSchedule:
    """A Node's schedulability: `kubectl cordon` sets spec.unschedulable; taints are (key, effect)."""

    name: str
    unschedulable: bool
    taints: tuple[tuple[str, str], ...]
    resource_version: str

    @classmethod
    def from_model(cls, node: Any) -> NodeSchedule:
        meta, spec = node.metadata, node.spec
        taints = tuple((t.key or "", t.effect or "") for t in (spec and spec.taints) or [])
        return cls(
            name=meta.name or "",
            unschedulable=bool(spec and spec.unschedulable),
            taints=taints,
            resource_version=meta.resource_version or "",
        )

    def cordoned(self, taint_keys: frozenset[str]) -> bool:
        """Unschedulable, or carrying one of `taint_keys` with a NoSchedule or NoExecute effect."""
        return self.unschedulable or any(
            key in taint_keys and effect in {"NoSchedule", "NoExecute"} for key, effect in self.taints
        )


async def list_node_schedules(kube: KubeClient) -> tuple[list[NodeSchedule], str]:
    """Every Node and the list's resourceVersion (to watch from)."""
    result = await kube._call("list_nodes", kube.core.list_node)
    return [NodeSchedule.from_model(n) for n in result.items], result.metadata.resource_version or ""


async def watch_node_schedules(
    kube: KubeClient, resource_version: str, timeout_seconds: int = 300
) -> AsyncIterator[tuple[str, NodeSchedule]]:
    """(ADDED|MODIFIED|DELETED, node) from `resource_version`; an expired version raises KubeError 410."""
    async with watch.Watch() as w:
        stream = w.stream(
            kube.core.list_node,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            allow_watch_bookmarks=True,
        )
        try:
            async for event in stream:
                if event["type"] in {"ADDED", "MODIFIED", "DELETED"}:
                    yield event["type"], NodeSchedule.from_model(event["object"])
        except ApiException as exc:
            raise _error("watch_nodes", exc) from exc


__all__ = ["KubeError", "NodeSchedule", "list_node_schedules", "watch_node_schedules"]
