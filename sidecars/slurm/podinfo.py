"""The pod-to-node identity Slinky's slurm-operator writes into a node's Comment.

Its NodeSet controller sets `Comment` to the JSON of `{"namespace", "podName", "node"}` (the pod's
namespace and name, and the Kubernetes node it runs on), as Go's encoding/json prints it:
`{"namespace":"slurm","podName":"slurm-worker-slinky-0","node":"kind-worker"}`. Where a Comment
holds that, it says which pod a Slurm node is without guessing from host names; anything else in a
Comment (an operator's note) is no identity and is left alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    pod_name: str
    node: str  # the Kubernetes node; "" when not given

    def as_json(self) -> dict[str, str]:
        return {"namespace": self.namespace, "podName": self.pod_name, "node": self.node}


def parse(comment: str | None) -> PodInfo | None:
    """The identity in a node's Comment, or None when the Comment is not one."""
    text = (comment or "").strip()
    if not text.startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    ns, pod, node = obj.get("namespace"), obj.get("podName"), obj.get("node", "")
    if not (isinstance(ns, str) and ns and isinstance(pod, str) and pod and isinstance(node, str)):
        return None
    return PodInfo(ns, pod, node)
