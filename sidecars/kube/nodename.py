"""Which Slurm node a worker pod is: one rule, used by the agent (for itself) and by the control
plane (for every pod), so the two never disagree.

Sources:
- `pod` (Slinky's layout, the default): a pod label when one is configured, else the pod's
  `spec.hostname`, else its name.
- `kube-node` (DaemonSet workers, one per Kubernetes Node): the Kubernetes Node's name (the pod's
  `spec.nodeName`), unless the Node carries the override annotation. A pod recreated on the same
  Node keeps its Slurm node name, whatever the new pod is called.

Pure: no API call here (the caller reads the Node), and no kubernetes-asyncio import.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sidecars.protocol import kube_names

if TYPE_CHECKING:
    from sidecars.kube.models import Pod

SOURCES = ("pod", "kube-node")
ANNOTATION = kube_names.SLURM_NODE_NAME_ANNOTATION
_FORBIDDEN = set(",[]=:#\"'\\/")  # hostlist syntax, scontrol's key=value, comments and quoting


def is_node_name(name: str) -> bool:
    """One Slurm node name: what `scontrol update nodename=` and `slurmd -N` take as a single node."""
    return (
        0 < len(name) <= 253
        and not any(c.isspace() or c in _FORBIDDEN or not c.isprintable() for c in name)
        and not name.startswith("-")
    )


@dataclass(frozen=True, slots=True)
class NodeNaming:
    source: str = "pod"  # one of SOURCES
    label: str = ""  # `pod` source: a pod label naming the Slurm node
    annotation: str = ANNOTATION  # `kube-node` source: the Node annotation that overrides its name


@dataclass(frozen=True, slots=True)
class Named:
    name: str | None  # None: no Slurm node (yet, or because the input is bad: see `why`)
    why: str  # where the name came from, or why there is none


def first_claimant(pods: Iterable[Pod]) -> Pod | None:
    """Of the pods that claim one Slurm node, the one that holds it: the oldest (creationTimestamp),
    then by name. A DaemonSet's surge pod is newer than the pod it replaces, so the old one keeps
    the node until it is gone."""
    return min(pods, key=lambda p: (p.created or "~", p.namespace, p.name), default=None)


def slurm_node_name(
    naming: NodeNaming,
    *,
    pod_name: str,
    pod_hostname: str = "",
    pod_labels: Mapping[str, str] | None = None,
    kube_node: str = "",
    node_annotations: Mapping[str, str] | None = None,
) -> Named:
    """The Slurm node of a worker pod. A bad value is refused (name None), never passed on or
    replaced by a guess: a guess could claim another worker's Slurm node."""
    if naming.source == "kube-node":
        if not kube_node:
            return Named(None, "pod not scheduled to a Kubernetes node yet")
        override = (node_annotations or {}).get(naming.annotation)
        if override is not None:
            value = override.strip()
            if not is_node_name(value):
                bad = f"annotation {naming.annotation}={override!r} on node {kube_node}"
                return Named(None, f"{bad} is not a Slurm node name")
            return Named(value, f"annotation {naming.annotation} on node {kube_node}")
        if not is_node_name(kube_node):
            return Named(None, f"Kubernetes node name {kube_node!r} is not a Slurm node name")
        return Named(kube_node, f"Kubernetes node {kube_node}")
    labels = pod_labels or {}
    if naming.label and labels.get(naming.label):
        value = labels[naming.label]
        if not is_node_name(value):
            return Named(None, f"label {naming.label}={value!r} is not a node name")
        return Named(value, f"label {naming.label}")
    if pod_hostname:
        return Named(pod_hostname, "pod hostname")
    return Named(pod_name or None, "pod name")
