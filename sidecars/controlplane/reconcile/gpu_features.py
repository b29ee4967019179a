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

from dataclasses import dataclass, field

import structlog

from sidecars.controlplane.fleet.slinky import slinky_pod
from sidecars.controlplane.reconcile.deps import WriterDeps
from sidecars.controlplane.reconcile.round import Outcome, View, unready
from sidecars.kube.gpudomain import is_ours, merged, wanted
from sidecars.slurm import SlurmError

log = structlog.get_logger(__name__)


@dataclass(eq=False)
class GpuFeatureSync:
    name = "gpu_features"

    deps: WriterDeps
    # Slurm node -> problems logged
    _said: dict[str, tuple[str, ...]] = field(default_factory=dict, init=False)
    writes: int = field(default=0, init=False)

    @property
    def ready(self) -> bool:
        return self.deps.gpu_caches_synced

    async def reconcile(self, view: View) -> Outcome:
        """One pass (leader only, after a refresh): the nodes whose domain features differ, written."""
        if (skip := unready(view, self.ready)) is not None:
            return skip
        pods, snap = view.pods, view.snapshot
        domains = self.deps.compute_domains()
        made = 0
        for pod in pods:
            name = self.deps.node_of(pod)
            node = snap.nodes.get(name)
            host = self.deps.nodes.nodes.get(pod.node_name) if pod.node_name else None
            if node is None or host is None or pod.deleting:
                continue  # nothing known of its domain: leave its features as they are
            if slinky_pod(pod, self.deps.slinky_mode):
                continue  # the operator sets them, as k8s/<feature>, from the Node's annotation
            want = wanted(host.name, host.labels, domains)
            if want.problems:
                if self._said.get(name) != want.problems:
                    log.warning(
                        "gpu_domain_refused", node=name, kube_node=host.name, problems=list(want.problems)
                    )
                    self._said[name] = want.problems
                continue
            self._said.pop(name, None)
            have = {f for f in node.features if is_ours(f)}
            active = {f for f in node.active_features if is_ours(f)}
            if have == set(want.features) and active == set(want.features):
                continue
            available = merged(node.features, want.features)
            try:
                await self.deps.slurm.set_features(
                    name, available, merged(node.active_features, want.features)
                )
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
        return Outcome(made)
