"""Maintenance windows from Kubernetes: a Node annotated `slurm-sidecars.io/maintenance:
<RFC 3339 start>/<duration>` puts the Slurm nodes of its worker pods in the window `k8s-<node>`.

The annotation owns its window: removed, the window is deleted (its drains undone the same way as
any window's). An annotation whose start has passed but whose end has not opens the window now; one
whose end has passed is ignored. A malformed one is logged and skipped, once per value.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import structlog

from sidecars.controlplane.changes.maintenance import (
    KUBE_PREFIX,
    Maintenance,
    WindowError,
    parse_duration,
    parse_start,
)
from sidecars.controlplane.fleet.kube_nodes import NodeCache
from sidecars.kube import Pod
from sidecars.protocol import kube_names

log = structlog.get_logger(__name__)

ANNOTATION = kube_names.MAINTENANCE_ANNOTATION
MINUTE = 60


def window_name(node: str) -> str:
    """`k8s-<node>` in the window alphabet (Node names are DNS subdomains: dots become dashes)."""
    return (KUBE_PREFIX + re.sub(r"[^a-z0-9-]", "-", node.lower()))[:63].rstrip("-")


def parse_annotation(value: str, now: float) -> tuple[int, int] | None:
    """`<start>/<duration>` -> (start, seconds), the start moved to now when already past; None when over."""
    start_text, sep, duration_text = value.strip().rpartition("/")
    if not sep or start_text.strip().lower() == "now":
        raise WindowError(422, f"{ANNOTATION} must be <RFC 3339 start>/<duration>, got {value!r}")
    seconds = parse_duration(duration_text)
    start = parse_start(start_text, float("-inf"))  # checked against the end below, not the clock
    end = start + seconds
    if end <= now + MINUTE:
        return None
    begin = max(start, int(now))
    return begin, ((end - begin + MINUTE - 1) // MINUTE) * MINUTE


@dataclass(eq=False)
class NodeWindows:
    """Each cycle (leader only): annotated Nodes -> windows of their worker pods' Slurm nodes."""

    maintenance: Maintenance
    nodes: NodeCache
    pods: Callable[[], Iterable[Pod]]
    slurm_node: Callable[[Pod], str]
    clock: Callable[[], float] = time.time
    # (node, value) already logged as malformed
    _bad: set[tuple[str, str]] = field(default_factory=set, init=False)

    async def sync(self) -> None:
        if not self.nodes.synced.is_set():
            return
        now = self.clock()
        wanted: dict[str, tuple[str, str]] = {}  # window -> (node, annotation)
        for kn in self.nodes.nodes.values():
            value = kn.annotations.get(ANNOTATION)
            if value:
                wanted[window_name(kn.name)] = (kn.name, value)
        existing = {w.name: w for w in await self.maintenance.read() if w.source == "kubernetes"}
        for name in sorted(set(existing) - set(wanted)):
            log.info("maintenance_annotation_removed", window=name)
            try:
                await self.maintenance.delete(name)
            except WindowError as exc:
                log.warning("maintenance_delete_failed", window=name, error=exc.message)
        for name, (node, value) in sorted(wanted.items()):
            if name in existing:
                continue
            try:
                parsed = parse_annotation(value, now)
                if parsed is None:
                    continue  # over already
                slurm = sorted({self.slurm_node(p) for p in self.pods() if p.node_name == node})
                if not slurm:
                    continue  # no worker pod there (yet): nothing of Slurm's to take out
                start, seconds = parsed
                await self.maintenance.create(
                    name=name,
                    nodes=",".join(slurm),
                    start="now" if start <= now else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
                    duration=f"{seconds // MINUTE}m",
                    reason=f"Kubernetes Node {node} ({ANNOTATION})",
                    kube=True,
                )
            except WindowError as exc:
                if (node, value) not in self._bad:
                    self._bad.add((node, value))
                    log.warning("maintenance_annotation_refused", node=node, value=value, error=exc.message)
