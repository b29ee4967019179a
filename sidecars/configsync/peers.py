"""HA controllers: the --peer list, which may name every controller pod, this one included.

A StatefulSet's pods share one command line, so each config-sync is given every controller pod's
address (`http://slurmctld-0.slurmctld.slurm.svc.cluster.local.:9100`, ...) and its own pod's name
(`--pod-name`, the downward API's metadata.name): the peer whose host is that name, as a pod's DNS
name in its headless Service is, is this pod itself and is not asked.

A peer's host is an IP address or a fully qualified name ending in a dot. A relative name goes
through the pod's DNS search list: `slurmctld-0.slurmctld`, should the Service be missing here,
resolves as pod `slurmctld-0` of Service... in a namespace named `slurmctld`, which anyone allowed
to create namespaces can make, and which would be sent the viewer token.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

__all__ = ["others"]


def _host(url: str) -> str:
    try:
        host = urlsplit(url).hostname
    except ValueError as exc:
        raise ValueError(f"--peer: {url!r} is not a URL: {exc}") from None
    if not host:
        raise ValueError(f"--peer: {url!r} names no host")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not host.endswith("."):
            raise ValueError(
                f"--peer: {url!r}: a fully qualified name ending in a dot is expected "
                "(POD.SERVICE.NAMESPACE.svc.CLUSTER-DOMAIN.), or an IP address: a name without the "
                "dot goes through the DNS search list"
            ) from None
    return host.rstrip(".")  # compared with --pod-name without the dot


def others(peers: tuple[str, ...], pod_name: str | None) -> tuple[str, ...]:
    """The peers to ask: each once, without this pod's own address (its host `pod_name` or
    `pod_name.<service>...`). A list that names nothing but this pod is an error, not a lone pod."""
    seen: dict[str, str] = {}
    for url in peers:
        host = _host(url)
        if host in seen:
            raise ValueError(f"--peer: {url} and {seen[host]} name the same host")
        seen[host] = url
    if pod_name is None:
        return tuple(seen.values())
    kept = tuple(u for h, u in seen.items() if h != pod_name and not h.startswith(f"{pod_name}."))
    if peers and not kept:
        raise ValueError(f"--peer: every peer given is this pod ({pod_name}); name the other controller pods")
    return kept
