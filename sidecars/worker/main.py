"""`slurm-sidecars worker`: the agent's process from its flags to a running `Agent`.

Before the agent starts: which Slurm node this pod is (a DaemonSet's worker reads it from its
Kubernetes Node), the features and topology it registers with, and the claim check that keeps two
pods from serving one node. The flags themselves are stated in `settings`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from typing import TYPE_CHECKING

import structlog

from sidecars.kube import pod_events
from sidecars.runtime import daemon, logs
from sidecars.slurm import SlurmClient
from sidecars.worker import naming
from sidecars.worker.claim import ClaimCheck
from sidecars.worker.service import Agent
from sidecars.worker.settings import WorkerSettings, configure, from_args

if TYPE_CHECKING:
    from sidecars.kube import KubeClient, Pod

log = structlog.get_logger(__name__)

__all__ = ["claim_check", "configure", "main"]


def claim_check(settings: WorkerSettings, kube: KubeClient) -> ClaimCheck:
    """The pods on this pod's Kubernetes Node, as the claim rule reads them."""
    where = f"spec.nodeName={settings.kube_node}"

    async def on_node() -> list[Pod]:
        pods, _ = await kube.list_pods(settings.pod_namespace, settings.worker_selector, where)
        return pods

    return ClaimCheck(
        on_node,
        (settings.pod_namespace, settings.pod_name),
        settings.node_name,
        interval=settings.poll_seconds,
    )


def main(args: argparse.Namespace) -> int:
    given = from_args(args)

    async def body(stop: asyncio.Event) -> None:
        async with contextlib.AsyncExitStack() as stack:
            kube: KubeClient | None = None
            if given.node_name_from == "kube-node":  # DaemonSet workers: the Node names the Slurm node
                from sidecars.kube import KubeClient as Client
                from sidecars.kube import load_configuration

                conf = await load_configuration()
                if conf is not None:
                    kube = await stack.enter_async_context(Client(conf))
            get_node = kube.get_node if kube is not None and given.node_name_annotation else None
            settings = await naming.resolve(given, get_node)
            logs.bind("worker", node=settings.node_name, pod=settings.pod)
            if settings.node_name_from == "kube-node":
                node_reader = kube.get_node if kube is not None else None
                await naming.write_features(settings, node_reader)
                # `slurmd -V` reads no config (slurmd has not fetched it yet) and is the pod's slurmd
                release = SlurmClient(timeout=settings.slurm_timeout_seconds).slurmd_version
                await naming.write_topology(settings, node_reader, release)
            claim = claim_check(settings, kube) if kube is not None else None
            if claim is None and settings.node_name_from == "kube-node":
                log.warning("slurm_node_claim_unchecked", why="no Kubernetes API configuration")
            async with pod_events("slurm-sidecars-worker") as events:
                await Agent(settings, events=events, claim=claim).run(stop)

    return daemon.run(body)
