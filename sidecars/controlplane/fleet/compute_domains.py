"""NVIDIA's ComputeDomains (a custom resource, maybe not installed), listed and watched: which
Kubernetes Nodes joined which NVLink domain (reconcile.gpu_features makes them Slurm features)."""

from __future__ import annotations

from sidecars.kube import KubeClient
from sidecars.kube.cache import WatchCache
from sidecars.kube.gpudomain import ComputeDomain


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
