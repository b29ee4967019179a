"""Pod conditions written through the status subresource (`PATCH .../pods/NAME/status`).

A strategic-merge patch: conditions merge by `type`, so ours never replace the kubelet's (Ready,
ContainersReady, ...). 409 is retried like any pod patch: the merge applies cleanly on the next try.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sidecars.kube.client import KubeClient


async def patch_pod_conditions(
    kube: KubeClient, namespace: str, name: str, conditions: Sequence[Mapping[str, str]]
) -> None:
    body = {"status": {"conditions": [dict(c) for c in conditions]}}
    await kube.call(
        "patch_pod_status",
        lambda: kube.core.patch_namespaced_pod_status(name, namespace, body),
        conflict_too=True,
    )
