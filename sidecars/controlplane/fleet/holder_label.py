"""With one control plane per controller pod (manifests/ha), the Lease holder's pod carries
`slurm-sidecars.io/control-plane=leader` and no other pod does, so a Service that selects it reaches
the replica that writes: a follower answers an agent's drain with 503, and its snapshot versions are
its own. Written by the holder only (every write asks the Lease): it labels its own pod and takes the
label off any other; a holder lost with its pod loses the label with it.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from sidecars.kube import KubeClient
from sidecars.protocol import kube_names

log = structlog.get_logger(__name__)

LABEL = kube_names.CONTROL_PLANE_LABEL
VALUE = "leader"


class HolderLabel:
    def __init__(
        self, kube: KubeClient, namespace: str, pod_name: str, is_leader: Callable[[], bool]
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._pod = pod_name
        self._is_leader = is_leader

    async def sync(self) -> None:
        """One pass: one list of the labelled pods, a patch only where they are not as they should be."""
        if not self._pod or not self._is_leader():
            return
        labelled, _ = await self._kube.list_pods(self._namespace, f"{LABEL}={VALUE}")
        for pod in labelled:
            if pod.name != self._pod:
                await self._kube.label_pod(self._namespace, pod.name, {LABEL: None})
                log.info("holder_label_removed", pod=pod.name)
        if self._pod not in {p.name for p in labelled}:
            await self._kube.label_pod(self._namespace, self._pod, {LABEL: VALUE})
            log.info("holder_label_set", pod=self._pod)
