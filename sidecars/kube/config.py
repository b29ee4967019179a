"""Where the Kubernetes API is: in-cluster service account, else a kubeconfig, else nowhere (features off)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import structlog
from kubernetes_asyncio import config as kconfig
from kubernetes_asyncio.client import Configuration

from sidecars.runtime.settings import ConfigError

log = structlog.get_logger(__name__)


async def load_configuration(kubeconfig: str | None = None, *, strict: bool = False) -> Configuration | None:
    """A client Configuration, or None (said once in the log) when there is no cluster to talk to.

    An explicit `kubeconfig` wins; then the in-cluster service account; then `$KUBECONFIG` or
    `~/.kube/config` when such a file exists. `strict`: inside a cluster (`KUBERNETES_SERVICE_HOST`
    set) a service account that cannot be read is a ConfigError, not "no Kubernetes": a control
    plane going on without it would take itself for the only replica, and lead beside the leader.
    """
    conf = Configuration()
    if kubeconfig:
        await kconfig.load_kube_config(config_file=kubeconfig, client_configuration=conf)
        log.info("kubernetes_config", source="kubeconfig", path=kubeconfig)
        return conf
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            kconfig.load_incluster_config(client_configuration=conf)  # type: ignore[no-untyped-call]
            log.info("kubernetes_config", source="in-cluster")
            return conf
        except kconfig.ConfigException as exc:
            if strict:
                raise ConfigError(
                    f"in a Kubernetes cluster (KUBERNETES_SERVICE_HOST is set) but its configuration "
                    f"cannot be loaded: {exc}"
                ) from None
            log.warning("kubernetes_incluster_config_failed", error=str(exc))
    path = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if await asyncio.to_thread(Path(path).is_file):
        await kconfig.load_kube_config(config_file=path, client_configuration=conf)
        log.info("kubernetes_config", source="kubeconfig", path=path)
        return conf
    log.warning(
        "kubernetes_disabled",
        reason="no in-cluster service account and no kubeconfig; "
        "Kubernetes features (events, deletion cost, recycling, leader election) are off",
    )
    return None
