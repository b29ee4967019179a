"""Topology and GPU-domain features as Slinky's Node annotations, for the operator to apply.

Beside Slinky's slurm-operator (v1.3), a NodeSet pod's Slurm node is placed and given features by
the operator, from annotations on the Kubernetes Node the pod runs on:

- `topology.slinky.slurm.net/spec`: comma-separated `<topology>:<unit>` places (`topo-switch:s1,
  topo-block:b1`), which it sets as the Slurm node's topology (removing it clears the topology);
- `features.slinky.slurm.net/spec`: comma-separated feature names, each set on the Slurm node as
  `k8s/<name>` (available and active); it owns only the `k8s/` features.

So in Slinky mode our topology sync and GPU-domain features do not write Slurm for those pods (they
would fight the operator, which replaces the `k8s/` features each pass); this writes the place and
the domains we compute into the two annotations instead. Other writers may share them (a topology
discovery daemon, a cloud's switch id): only our part is replaced, the place in our topology (its
name) and the features with our prefixes; the rest of each value is kept as it was. A value we
refuse to compute (a missing label) writes nothing. One patch per Node, only when it changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field

import structlog

from sidecars.controlplane.fleet.slinky import slinky_pod
from sidecars.controlplane.reconcile.deps import WriterDeps
from sidecars.controlplane.reconcile.pacing import TokenBucket
from sidecars.controlplane.reconcile.round import Outcome, View, unready
from sidecars.kube import KubeNode, Pod
from sidecars.kube.gpudomain import is_ours, wanted
from sidecars.kube.topology import Placement, TopologySpec, placement

log = structlog.get_logger(__name__)

TOPOLOGY_SPEC = "topology.slinky.slurm.net/spec"
FEATURES_SPEC = "features.slinky.slurm.net/spec"
QPS = 5.0  # Node patches a second, at most: a few hundred Nodes at a first pass go out within a minute


def _words(value: str | None) -> list[str]:
    return [w.strip() for w in (value or "").split(",") if w.strip()]


def topology_value(have: str | None, spec: TopologySpec, place: Placement) -> str:
    """`have` with its place in `spec`'s topology set to `place` (the others kept, in order)."""
    mine = place.in_place(spec)
    kept = [w for w in _words(have) if w.partition(":")[0] != spec.name]
    return ",".join([*kept, mine])


def features_value(have: str | None, features: Sequence[str]) -> str | None:
    """`have` with our features replaced by `features` (others kept); None when nothing is left."""
    kept = [w for w in _words(have) if not is_ours(w)]
    words = [*kept, *sorted(features)]
    return ",".join(words) if words else None


@dataclass(eq=False)
class SlinkySpecs:
    name = "slinky_specs"

    deps: WriterDeps
    _: KW_ONLY
    topology: TopologySpec | None
    gpu_features: bool
    qps: float = QPS
    _bucket: TokenBucket = field(init=False)
    writes: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._bucket = TokenBucket(self.qps)

    @property
    def ready(self) -> bool:
        return self.deps.gpu_caches_synced

    def hosts(self, pods: Sequence[Pod]) -> set[str]:
        """The Kubernetes Nodes that run a Slinky worker pod: the ones whose annotations we keep."""
        return {
            p.node_name
            for p in pods
            if p.node_name and not p.deleting and slinky_pod(p, self.deps.slinky_mode)
        }

    async def reconcile(self, view: View) -> Outcome:
        if (skip := unready(view, self.ready)) is not None:
            return skip
        made = 0
        for name in sorted(self.hosts(view.pods)):
            host = self.deps.nodes.nodes.get(name)
            if host is None:
                continue
            patch = self._patch(host)
            if not patch:
                continue
            if not self._bucket.take():
                return Outcome(made, skipped="" if made else "rate limited: the rest at the next pass")
            try:
                await self.deps.kube.annotate_node(name, patch)
            except Exception as exc:  # the next pass writes it again
                log.warning("slinky_spec_write_failed", kube_node=name, error=str(exc))
                continue
            log.info("slinky_spec_written", kube_node=name, **{k.split(".")[0]: v for k, v in patch.items()})
            made += 1
        self.writes += made
        return Outcome(made)

    def _patch(self, host: KubeNode) -> Mapping[str, str | None]:
        out: dict[str, str | None] = {}
        have = host.annotations
        if self.topology is not None:
            place = placement(self.topology, host.labels)
            if isinstance(place, Placement):
                value = topology_value(have.get(TOPOLOGY_SPEC), self.topology, place)
                if value != have.get(TOPOLOGY_SPEC):
                    out[TOPOLOGY_SPEC] = value
        if self.gpu_features:
            domains = self.deps.compute_domains()
            want = wanted(host.name, host.labels, domains)
            if not want.problems:
                features = features_value(have.get(FEATURES_SPEC), want.features)
                if features != have.get(FEATURES_SPEC):
                    out[FEATURES_SPEC] = features
        return out
