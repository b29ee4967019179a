"""Does this pod hold its Slurm node? (DaemonSet workers: `--node-name-from=kube-node`.)

Two worker pods on one Kubernetes Node (a DaemonSet's surge pod beside the pod it replaces) resolve
to one Slurm node. The older one holds it (kube.nodename.first_claimant, the rule the control
plane applies across the fleet); the newer agent waits: it writes no name file (so its slurmd does
not start and take the node's registration over), heals nothing, its readiness fails saying which
pod holds the node, and its drain hook answers at once without draining the other pod's node.
The pods on the Node are listed again every `interval` until the holder is gone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog

from sidecars.kube.nodename import first_claimant
from sidecars.protocol.events import EventReason
from sidecars.runtime.events import EventSink
from sidecars.runtime.waits import until_set

if TYPE_CHECKING:
    from sidecars.kube import Pod

log = structlog.get_logger(__name__)

ListPods = Callable[[], Awaitable[list["Pod"]]]


class ClaimCheck:
    def __init__(self, list_pods: ListPods, me: tuple[str, str], node: str, *, interval: float = 5.0) -> None:
        self._list = list_pods
        self.me = me  # (namespace, name) of this agent's pod
        self.node = node
        self.interval = interval
        self.refused: str | None = "not checked yet"  # None: this pod holds the node
        self.last_look: float | None = None

    async def look(self) -> str | None:
        """List the pods on this Node once; the refusal, or None when this pod holds the node."""
        pods = [p for p in await self._list() if p.phase not in {"Succeeded", "Failed"}]
        self.last_look = time.monotonic()
        holder = first_claimant(pods)
        if holder is None or (holder.namespace, holder.name) == self.me:
            self.refused = None
        else:
            self.refused = (
                f"pod {holder.namespace}/{holder.name} holds Slurm node {self.node}: "
                f"pod {self.me[0]}/{self.me[1]} waits for it to go"
            )
        return self.refused

    async def wait_held(self, stop: asyncio.Event, events: EventSink) -> bool:
        """Until this pod holds the node (True) or `stop` is set (False)."""
        said: str | None = None
        while not stop.is_set():
            try:
                why = await self.look()
            except Exception as exc:  # the API unreachable: keep waiting, never assume the claim
                why = self.refused = f"cannot list the pods on this Kubernetes node: {exc}"
                self.last_look = time.monotonic()
            if why is None:
                if said is not None:
                    log.info("slurm_node_claimed", node=self.node)
                return True
            if why != said:
                log.warning("slurm_node_claim_refused", node=self.node, why=why)
                await events.emit(EventReason.SLURM_NODE_CLAIM_REFUSED, why, "Warning")
                said = why
            await until_set(stop, self.interval)
        return False
