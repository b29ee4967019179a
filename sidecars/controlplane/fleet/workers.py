"""Which worker pod is which Slurm node: the node whose Comment names the pod (Slinky writes it),
else the rule the agents use too (kube.nodename: host name, label, or the Kubernetes Node); and
one pod per node (fleet.claims sets the others aside)."""

from __future__ import annotations

from dataclasses import dataclass

from sidecars.controlplane.fleet.claims import Claims
from sidecars.controlplane.fleet.kube_nodes import NodeCache
from sidecars.controlplane.fleet.pods import PodCache
from sidecars.controlplane.fleet.snapshot import FleetView
from sidecars.kube import Pod
from sidecars.kube.nodename import Named, NodeNaming, slurm_node_name


@dataclass
class Workers:
    """The worker pods and their Slurm nodes. Without the Kubernetes API (`pods` None) there are
    none, and every agent's pod is none of ours."""

    fleet: FleetView
    naming: NodeNaming
    namespace: str
    pods: PodCache | None = None
    nodes: NodeCache | None = None

    def __post_init__(self) -> None:
        self.claims = Claims(self.name_of, enforce=self.naming.source == "kube-node")
        self._pod_index: tuple[int, dict[tuple[str, str], str]] = (-1, {})  # see name_of

    def name_of(self, pod: Pod) -> Named:
        snap = self.fleet.snapshot
        if self._pod_index[0] != snap.version:  # built once per snapshot, not once per pod
            index = {(v.pod.namespace, v.pod.pod_name): v.name for v in snap.nodes.values() if v.pod}
            self._pod_index = (snap.version, index)
        found = self._pod_index[1].get((pod.namespace, pod.name))
        if found:
            return Named(found, "the node's Comment")
        host = self.nodes.nodes.get(pod.node_name) if self.nodes and pod.node_name else None
        if self.naming.source == "kube-node" and pod.node_name and host is None:
            # its annotation (an override) is unknown: no guess that could claim another's node
            return Named(None, f"Kubernetes node {pod.node_name} not found")
        return slurm_node_name(
            self.naming,
            pod_name=pod.name,
            pod_hostname=pod.hostname,
            pod_labels=pod.labels,
            kube_node=pod.node_name,
            node_annotations=host.annotations if host else None,
        )

    def node_of(self, pod: Pod) -> str:
        return self.name_of(pod).name or ""

    @property
    def naming_ready(self) -> bool:
        """Names from the Nodes need the Node cache listed first (else every pod looks unnamed)."""
        if self.naming.source != "kube-node":
            return True
        return self.nodes is not None and self.nodes.synced.is_set()

    @property
    def ready(self) -> bool:
        """The pods listed and nameable: what every writer waits for."""
        return self.pods is not None and self.pods.synced.is_set() and self.naming_ready

    def held(self) -> list[Pod]:
        """The worker pods that hold their Slurm node (one each); conflicts are set aside (claims)."""
        if self.pods is None:
            return []
        return self.claims.resolve(self.pods.pods.values())

    def on_node(self, node: str) -> Pod | None:
        """The worker pod that holds this Slurm node, if any."""
        return next((p for p in self.held() if self.node_of(p) == node), None)

    def agent_node(self, namespace: str, name: str, uid: str) -> str | None:
        """The Slurm node of the worker pod an agent's token is bound to: "" when that pod is none
        of ours (another namespace, not a worker, an earlier incarnation, refused its claim), None
        while the pods are not listed yet."""
        if self.pods is None or namespace != self.namespace:
            return ""
        if not self.pods.synced.is_set() or not self.naming_ready:
            return None
        pod = self.pods.pods.get(name)
        if pod is None or pod.uid != uid or pod.uid in self.claims.refused:
            return ""
        return self.node_of(pod)
