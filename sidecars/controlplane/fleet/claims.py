"""One pod per Slurm node: which worker pods the control plane acts for.

Two pods that resolve to one Slurm node (a DaemonSet's surge pod beside the old one on the same
Kubernetes Node, two Nodes annotated with one name, two pods given one hostname) are a conflict:
the first pod (oldest creationTimestamp, then name) keeps the node, each later one is refused:
it is not ranked, recycled, drained or given conditions for a node that is not its own, and an
Event on it and a log line name both pods. A pod whose name cannot be decided (not scheduled, a
malformed override) is set aside the same way, with the reason. Once the holder is gone the next
claimant takes the node over at the next pass.

Applied where pods are named after their Kubernetes Node (`--node-name-from=kube-node`), where
two pods on one Node are a rollout's normal state; the pod naming keeps its behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from sidecars.kube import Pod
from sidecars.kube.nodename import Named, first_claimant

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RefusedClaim:
    pod: Pod
    node: str | None  # the Slurm node it claims (None: no name could be decided)
    holder: str | None  # the pod that holds that node ("namespace/name"), when it is a conflict
    why: str

    def message(self) -> str:
        if self.holder is not None:
            return (
                f"pod {self.pod.namespace}/{self.pod.name} claims Slurm node {self.node}, which pod "
                f"{self.holder} holds: refused (not registered, drained or ranked for it)"
            )
        return f"pod {self.pod.namespace}/{self.pod.name} has no Slurm node: {self.why}"

    def as_json(self) -> dict[str, str | None]:
        return {
            "pod": f"{self.pod.namespace}/{self.pod.name}",
            "node": self.node,
            "holder": self.holder,
            "why": self.why,
        }


class Claims:
    def __init__(self, name_of: Callable[[Pod], Named], *, enforce: bool = True) -> None:
        self._name_of = name_of
        self._enforce = enforce  # False: every pod passes (the pod naming's behaviour, unchanged)
        self.refused: dict[str, RefusedClaim] = {}  # pod uid -> why, as of the last pass
        self._reported: dict[str, tuple[str | None, str | None]] = {}  # uid -> (node, holder) reported

    def resolve(self, pods: Iterable[Pod]) -> list[Pod]:
        """The pods that hold their Slurm node; the rest land in `refused`."""
        if not self._enforce:
            return sorted(pods, key=lambda p: (p.namespace, p.name))
        by_node: dict[str, list[Pod]] = {}
        refused: dict[str, RefusedClaim] = {}
        for pod in pods:
            named = self._name_of(pod)
            if named.name is None:
                if pod.node_name or pod.ready:  # a pending pod with no Node yet is no fault
                    refused[pod.uid] = RefusedClaim(pod, None, None, named.why)
                continue
            by_node.setdefault(named.name, []).append(pod)
        held: list[Pod] = []
        for node, claimants in by_node.items():
            first = first_claimant(claimants)
            assert first is not None
            held.append(first)
            for pod in claimants:
                if pod is first:
                    continue
                refused[pod.uid] = RefusedClaim(
                    pod, node, f"{first.namespace}/{first.name}", "another pod holds this node"
                )
        self.refused = refused
        self._reported = {u: v for u, v in self._reported.items() if u in refused}
        return sorted(held, key=lambda p: (p.namespace, p.name))

    def to_report(self) -> list[RefusedClaim]:
        """Refusals not reported yet (each once, again only when what it says changes)."""
        out = []
        for uid, r in sorted(self.refused.items(), key=lambda kv: kv[1].pod.name):
            key = (r.node, r.holder)
            if self._reported.get(uid) != key:
                self._reported[uid] = key
                log.warning(
                    "worker_pod_refused",
                    pod=f"{r.pod.namespace}/{r.pod.name}",
                    node=r.node,
                    holder=r.holder,
                    why=r.why,
                )
                out.append(r)
        return out
