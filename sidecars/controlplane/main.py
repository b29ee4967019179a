"""`slurm-sidecars control-plane`: its flags (`configure`), and `main`, which serves the control plane
until a stop signal."""

from __future__ import annotations

import argparse
import asyncio
import os
from contextlib import AsyncExitStack

import structlog
from prometheus_client import CollectorRegistry

from sidecars.controlplane import settings as cp_settings
from sidecars.controlplane.service import ControlPlaneService
from sidecars.controlplane.settings import ControlPlaneSettings
from sidecars.kube import KubeClient, load_configuration
from sidecars.runtime import daemon, logs
from sidecars.runtime.tasks import until_stopped
from sidecars.slurm import SlurmClient, SlurmMetrics

log = structlog.get_logger(__name__)


async def serve(settings: ControlPlaneSettings, stop: asyncio.Event) -> None:
    pod = f"{settings.namespace}/{settings.pod_name}" if settings.pod_name else None
    logs.bind("control-plane", env=os.environ, pod=pod, identity=settings.identity)
    async with AsyncExitStack() as stack:
        kube: KubeClient | None = None
        registry = CollectorRegistry()
        if settings.kubernetes:
            conf = await load_configuration(settings.kubeconfig, strict=True)
            if conf is not None:
                kube = await stack.enter_async_context(KubeClient(conf, registry=registry))
        else:
            log.warning("kubernetes_disabled", reason="--kubernetes=off")
        plane = ControlPlaneService(settings, SlurmClient(metrics=SlurmMetrics(registry)), kube, registry)
        await stack.enter_async_context(plane.running())
        await until_stopped(stop, plane.tasks)


def configure(parser: argparse.ArgumentParser) -> None:
    cp_settings.configure(parser)


def main(args: argparse.Namespace) -> int:
    settings = cp_settings.from_args(args)
    return daemon.run(lambda stop: serve(settings, stop))
