"""slurmd's own word on its health, where it has one, and the pod identity Slinky wrote for the node.

From 25.11 slurmd answers `GET /readyz` on its port: readiness then asks it (at most once per
poll). Before 25.11 (or with `CommunicationParameters=disable_http`) there is nothing to ask, and
readiness rests on the registration check alone; `/status` says which was used. The node record
read for the address and port also carries the Comment where Slinky's operator writes the pod's
identity (`{"namespace","podName","node"}`): shown in `/status`, and a record naming another pod
is a node this pod must not act for (`identity_mismatch`).
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import structlog

from sidecars.runtime.health import CheckResult
from sidecars.slurm import SlurmClient, SlurmError, health, podinfo

log = structlog.get_logger(__name__)

RECORDS_PER_POLLS = 4  # the node record is re-read every 4th poll (a minute at the default 15 s)


class SlurmdHealth:
    def __init__(
        self, client: SlurmClient, node_name: str, pod: tuple[str, str], *, interval: float = 5.0
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.pod = pod  # (namespace, name) of this agent's pod
        self.interval = interval
        self.session: aiohttp.ClientSession | None = None
        self.method = "unknown"  # "readyz" or "node_state"
        self.answer: health.Answer | None = None
        self.identity: podinfo.PodInfo | None = None
        self._served: bool | None = None
        self._port = 6818
        self._next = 0.0
        self._record_due = 0.0
        self._where: tuple[str, int] | None = None
        self._log = log.bind(node=node_name)

    async def _settle_method(self) -> None:
        version = await self.client.version()
        config = await self.client.show_config()
        self._served = health.served(version, config.get("CommunicationParameters", ""))
        self._port = int(config.get("SlurmdPort") or 6818)
        self.method = "readyz" if self._served else "node_state"
        self._log.info("slurmd_health_method", method=self.method, release=str(version))

    async def step(self) -> None:
        """Ask slurmd's /readyz at most once per `interval`. The node record (address, port, the
        Comment) is read from Slurm every 4th poll, or at once after a failed probe: per-pod agents
        must not add a query per poll to slurmctld's load."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval
        if self._served is None or now >= self._record_due or (self.answer and not self.answer.ok):
            try:
                if self._served is None:
                    await self._settle_method()
                node = await self.client.node(self.node_name)
            except SlurmError as exc:
                self._log.debug("slurmd_health_not_refreshed", error=str(exc))
                return
            self._record_due = now + self.interval * RECORDS_PER_POLLS
            self.identity = podinfo.parse(node.comment) if node else None
            self._where = (node.address or "127.0.0.1", node.port or self._port) if node else None
        if not self._served or self.session is None:
            return
        if self._where is None:
            self.answer = health.Answer(False, "Slurm has no record of the node: no address to ask")
            return
        self.answer = await health.probe(self.session, *self._where)

    @property
    def identity_mismatch(self) -> bool:
        return self.identity is not None and (self.identity.namespace, self.identity.pod_name) != self.pod

    def check(self) -> CheckResult:
        if self.identity_mismatch:
            assert self.identity is not None
            other = f"{self.identity.namespace}/{self.identity.pod_name}"
            return CheckResult(False, f"the node's Comment names pod {other}, not this pod")
        if self.method != "readyz":
            return CheckResult(True, "slurmd serves no /readyz here: judged by its registration")
        if self.answer is None:
            return CheckResult(False, "slurmd's /readyz not asked yet")
        return CheckResult(self.answer.ok, f"slurmd /readyz: {self.answer.detail}")

    def as_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "detail": self.answer.detail if self.answer else None,
            "ok": self.answer.ok if self.answer else None,
            "pod_identity": self.identity.as_json() if self.identity else None,
        }
