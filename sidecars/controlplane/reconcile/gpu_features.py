"""GPU domains -> Slurm features: each worker's Slurm node carries a feature naming its NVLink
domain (the Node's `nvidia.com/gpu.clique` label, the ComputeDomains its Node joined), so
`--constraint=nvlink-clique-...` keeps a job inside one domain.

Decided after each refresh from the snapshot (which holds every node's features) and the watched
Nodes and ComputeDomains: a write only where our features differ from Slurm's (O(changes)), one
`scontrol update` per node, in place. Only features with our prefixes are added or removed; an
admin's (or a NodeSet's) are written back as they are. A bad value (empty, spaces, constraint
operators) is logged once and leaves that node's features untouched: it never reaches Slurm.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import structlog

from sidecars.controlplane.fleet.kube_nodes import NodeCache
from sidecars.controlplane.fleet.snapshot import FleetSnapshot
from sidecars.kube import KubeClient, Pod
from sidecars.kube.cache import WatchCache
from sidecars.kube.gpudomain import ComputeDomain, is_ours, merged, wanted
from sidecars.slurm import SlurmClient, SlurmError

log = structlog.get_logger(__name__)


class ComputeDomainCache(WatchCache[ComputeDomain]):
    def __init__(self, kube: KubeClient, *, watch_seconds: int = 300) -> None:
        super().__init__(
            kube.list_compute_domains,
            lambda rv: kube.watch_compute_domains(rv, watch_seconds),
            lambda cd: cd.key,
            lambda cd: cd.resource_version,
            failed_event="computedomain_watch_failed",
            silence_seconds=kube.watch_silence_seconds,
        )


class GpuDomainSync:
    def __init__(
        self,
        slurm: SlurmClient,
        nodes: NodeCache,
        node_of: Callable[[Pod], str],
        domains: ComputeDomainCache | None = None,
    ) -> None:
        self._slurm = slurm
        self._nodes = nodes
        self._node_of = node_of
        self._domains = domains
        self._said: dict[str, tuple[str, ...]] = {}  # Slurm node -> problems logged
        self.writes = 0

    @property
    def ready(self) -> bool:
        return self._nodes.synced.is_set() and (self._domains is None or self._domains.synced.is_set())

    async def cycle(self, pods: Iterable[Pod], snap: FleetSnapshot) -> int:
        """One pass (leader only, after a refresh). Returns the nodes written."""
        domains = list(self._domains.items.values()) if self._domains is not None else []
        made = 0
        for pod in pods:
            name = self._node_of(pod)
            view = snap.nodes.get(name)
            host = self._nodes.nodes.get(pod.node_name) if pod.node_name else None
            if view is None or host is None or pod.deleting:
                continue  # nothing known of its domain: leave its features as they are
            want = wanted(host.name, host.labels, domains)
            if want.problems:
                if self._said.get(name) != want.problems:
                    log.warning(
                        "gpu_domain_refused", node=name, kube_node=host.name, problems=list(want.problems)
                    )
                    self._said[name] = want.problems
                continue
            self._said.pop(name, None)
            have = {f for f in view.features if is_ours(f)}
            active = {f for f in view.active_features if is_ours(f)}
            if have == set(want.features) and active == set(want.features):
                continue
            available = merged(view.features, want.features)
            try:
                await self._slurm.set_features(name, available, merged(view.active_features, want.features))
            except SlurmError as exc:  # the next pass tries again
                log.warning("gpu_domain_write_failed", node=name, error=exc.message)
                continue
            log.info(
                "gpu_domain_features",
                node=name,
                features=list(want.features),
                removed=sorted(have - set(want.features)),
            )
            made += 1
        self.writes += made
        return made
