"""What the writers act through, built once (assembly.py) and handed to each writer: the clients,
the watched caches, the drain batcher, the pod -> Slurm node mapping, the metrics, the two ways to
say something, and the settings every writer reads the same way. Each writer keeps only what is its
own (its settings group, its clock, its state)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sidecars.controlplane.fleet.compute_domains import ComputeDomainCache
from sidecars.controlplane.fleet.drains import DrainBatcher
from sidecars.controlplane.fleet.kube_nodes import NodeCache
from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.controlplane.reconcile.round import PodEmit
from sidecars.kube import KubeClient, Pod
from sidecars.kube.gpudomain import ComputeDomain
from sidecars.runtime.events import EventSink
from sidecars.slurm import SlurmClient


@dataclass(frozen=True)
class WriterDeps:
    """Shared by every writer; none of them owns any of it."""

    kube: KubeClient
    slurm: SlurmClient
    nodes: NodeCache  # the watched Kubernetes Nodes
    domains: ComputeDomainCache | None  # the watched ComputeDomains, only with --compute-domains
    drains: DrainBatcher  # every drain and undrain of ours goes through it
    node_of: Callable[[Pod], str]  # a worker pod's Slurm node
    metrics: ControlPlaneMetrics
    emit: PodEmit  # an Event on a worker pod
    events: EventSink  # the control plane's own Events (on its pod), for what concerns no live pod
    namespace: str  # the workers'
    # Slinky's pods are the operator's to drain, label and place (--slinky-mode; None: by owner)
    slinky_mode: bool | None
    # what every writer settles, paces and asks again by (a test moves it instead of waiting)
    clock: Callable[[], float] = time.monotonic

    @property
    def gpu_caches_synced(self) -> bool:
        """The Nodes listed, and the ComputeDomains too when they are watched: what a writer of GPU
        domains (Slurm features, Slinky's annotations) decides from."""
        return self.nodes.synced.is_set() and (self.domains is None or self.domains.synced.is_set())

    def compute_domains(self) -> list[ComputeDomain]:
        """The ComputeDomains as last listed and watched; none when they are not watched."""
        return list(self.domains.items.values()) if self.domains is not None else []
