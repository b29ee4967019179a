"""HA controllers: the --peer list, which may name every controller pod, this one included.

A StatefulSet's pods share one command line, so each config-sync is given every controller pod's
address (`http://slurmctld-0.slurmctld:9100`, `http://slurmctld-1.slurmctld:9100`, ...) and its own
pod's name (`--pod-name`, the downward API's metadata.name): the peer whose host is that name, as a
pod's DNS name in its headless Service is, is this pod itself and is not asked.
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["others"]


def _host(url: str) -> str:
    try:
        host = urlsplit(url).hostname
    except ValueError as exc:
        raise ValueError(f"--peer: {url!r} is not a URL: {exc}") from None
    if not host:
        raise ValueError(f"--peer: {url!r} names no host")
    return host


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
