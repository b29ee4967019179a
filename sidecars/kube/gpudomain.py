"""GPU (NVLink) domains as Slurm node features, so `--constraint` keeps a job inside one domain.

Two sources name a Kubernetes Node's domain:
- the GPU operator's NVLink clique label, `nvidia.com/gpu.clique=<cluster UUID>.<clique id>`:
  feature `nvlink-clique-<value>`;
- NVIDIA's DRA driver ComputeDomains (`resource.nvidia.com/v1beta1`, kind ComputeDomain), whose
  `status.nodes[].name` lists the Nodes that joined it: feature `nvlink-domain-<name>`.

Features we own start with those prefixes; every other feature (an admin's, a NodeSet's) is kept
as it is. A value that is empty or is no feature name (spaces, Slurm's constraint operators) is
refused with the reason: it never reaches Slurm. Pure: no API call here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

CLIQUE_LABEL = "nvidia.com/gpu.clique"
CLIQUE_PREFIX = "nvlink-clique-"
DOMAIN_PREFIX = "nvlink-domain-"
GROUP, VERSION, PLURAL = "resource.nvidia.com", "v1beta1", "computedomains"
# letters, digits and . _ - only: no constraint operator (& | , * [ ] ( ) !), no space, no `=`
_FEATURE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def is_ours(feature: str) -> bool:
    return feature.startswith((CLIQUE_PREFIX, DOMAIN_PREFIX))


def is_feature(text: str) -> bool:
    return _FEATURE.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class ComputeDomain:
    namespace: str
    name: str
    resource_version: str
    nodes: tuple[str, ...]  # Kubernetes Nodes in status.nodes

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_json(cls, obj: Mapping[str, object]) -> ComputeDomain:
        """From the API's JSON (custom objects arrive as plain dicts); odd shapes give no nodes."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        status = obj.get("status")
        listed = status.get("nodes") if isinstance(status, dict) else None
        nodes = tuple(
            str(n["name"])
            for n in (listed if isinstance(listed, list) else [])
            if isinstance(n, dict) and isinstance(n.get("name"), str) and n["name"]
        )
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            nodes=nodes,
        )


@dataclass(frozen=True, slots=True)
class Wanted:
    features: tuple[str, ...]  # ours, sorted
    problems: tuple[str, ...]  # values refused, and why


def wanted(kube_node: str, labels: Mapping[str, str], domains: Iterable[ComputeDomain] = ()) -> Wanted:
    """The domain features a Kubernetes Node's Slurm node should carry."""
    features: set[str] = set()
    problems: list[str] = []
    if CLIQUE_LABEL in labels:
        value = labels[CLIQUE_LABEL].strip()
        feature = CLIQUE_PREFIX + value
        if value and is_feature(feature):
            features.add(feature)
        else:
            problems.append(f"label {CLIQUE_LABEL}={labels[CLIQUE_LABEL]!r} on node {kube_node}: no feature")
    for cd in domains:
        if kube_node in cd.nodes:
            feature = DOMAIN_PREFIX + cd.name
            if cd.name and is_feature(feature):
                features.add(feature)
            else:
                problems.append(f"ComputeDomain {cd.key!r}: its name makes no feature")
    return Wanted(tuple(sorted(features)), tuple(problems))


def merged(current: Sequence[str], ours: Iterable[str]) -> tuple[str, ...]:
    """`current` with our features replaced by `ours`; everyone else's kept, in their order."""
    return (*[f for f in current if not is_ours(f)], *sorted(set(ours)))


def registration_features(kube_node: str, labels: Mapping[str, str]) -> str:
    """What a DaemonSet worker's slurmd adds to `--conf Features=` at registration: the clique
    feature from its Node's label, or "" (no `Features=` at all) when there is none or it is bad."""
    return ",".join(wanted(kube_node, labels).features)
