"""slurmd's own word on its health, where it has one, and the pod identity Slinky wrote for the node.

From 25.11 slurmd answers `GET /readyz` on its port: readiness then asks it, at most once per poll,
as `/readyz?verbose`, whose words (26.05: its workers and connection manager) `/status` shows.
The port is the one the pod's slurmd listens on, read from /proc (its socket inodes in its
network namespace's tcp table): no Slurm query, so a coordinated agent still makes none of its own.
Whether the release serves HTTP is what slurmd answers: an HTTP status (any) means it does; a
connection dropped without one is Slurm's own protocol (before 25.11, or with
`CommunicationParameters=disable_http`), and readiness then rests on the registration check alone.
`/status` says which was used. An agent on its own (no control plane) also reads its node record
every 4th poll for the Comment where Slinky's operator writes the pod's identity
(`{"namespace","podName","node"}`): shown in `/status`, and a record naming another pod is a node
this pod must not act for (readiness fails).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import structlog

from sidecars.runtime.checks import CheckResult
from sidecars.slurm import SlurmClient, SlurmError, health, podinfo

log = structlog.get_logger(__name__)

SOURCES = ("verbose", "plain", "registration", "unknown")
RECORDS_PER_POLLS = 4  # alone, the node record is re-read every 4th poll (a minute at the default 15 s)


def listening_port(pid: int, proc: Path = Path("/proc")) -> tuple[str, int] | None:
    """The (address, port) a process listens on over TCP (its first listening IPv4 socket)."""
    try:
        inodes = set()
        for fd in (proc / str(pid) / "fd").iterdir():
            link = str(fd.readlink()) if fd.is_symlink() else ""
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
        table = (proc / str(pid) / "net" / "tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in table:
        f = line.split()
        if len(f) > 9 and f[3] == "0A" and f[9] in inodes:  # 0A: LISTEN
            hexaddr, hexport = f[1].split(":")
            octets = [str(int(hexaddr[i : i + 2], 16)) for i in (6, 4, 2, 0)]  # little-endian
            addr = ".".join(octets)
            return ("127.0.0.1" if addr == "0.0.0.0" else addr), int(hexport, 16)
    return None


class SlurmdHealth:
    def __init__(
        self,
        client: SlurmClient,
        node_name: str,
        pod: tuple[str, str],
        slurmd_pid: Callable[[], int | None],
        *,
        interval: float = 5.0,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.pod = pod  # (namespace, name) of this agent's pod
        self.slurmd_pid = slurmd_pid
        self.interval = interval
        self.session: aiohttp.ClientSession | None = None
        self.read_record = True  # False when coordinated: the agent makes no Slurm query of its own
        self.method = "unknown"  # "readyz" or "node_state"
        self.answer: health.Answer | None = None
        self.words: str | None = None  # slurmd's own words from /readyz?verbose (26.05)
        self.degraded: str | None = None  # why there are none
        self.identity: podinfo.PodInfo | None = None
        self._next = 0.0
        self._record_due = 0.0

    async def step(self) -> None:
        """At most once per `interval`: ask slurmd's /readyz (unless it has shown it serves none)."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval
        if self.read_record and now >= self._record_due:
            self._record_due = now + self.interval * RECORDS_PER_POLLS
            try:
                node = await self.client.node(self.node_name)
                self.identity = podinfo.parse(node.comment) if node else None
            except SlurmError as exc:
                log.debug("node_record_not_read", error=str(exc))
        if self.method == "node_state" or self.session is None:
            return
        pid = self.slurmd_pid()
        where = listening_port(pid) if pid is not None else None
        if where is None:
            self.answer = health.Answer(False, "no listening slurmd found to ask")
            return
        # the verbose read: 26.05's slurmd gives its words to anyone (no token; none under
        # PrivateData); one that serves no HTTP drops it, and the plain read below says so
        got = await health.readiness(self.session, *where)
        answer = got.answer
        if got.degraded != self.degraded and got.degraded is not None:
            log.info("slurmd_readyz_plain", why=got.degraded)  # once per reason, not per poll
        self.words, self.degraded = got.words, got.degraded
        if answer.http is False:  # Slurm's own protocol answered: no HTTP on this release
            self.method, self.answer = "node_state", None
            log.info("slurmd_health_method", method=self.method, why=answer.detail)
            return
        if answer.http and self.method != "readyz":
            self.method = "readyz"
            log.info("slurmd_health_method", method=self.method)
        self.answer = answer

    @property
    def source(self) -> str:
        """Where readiness comes from now (SOURCES): the metric's label."""
        if self.method == "node_state":
            return "registration"
        if self.method == "readyz" and self.answer is not None:
            return "verbose" if self.words else "plain"
        return "unknown"

    @property
    def identity_mismatch(self) -> bool:
        return self.identity is not None and (self.identity.namespace, self.identity.pod_name) != self.pod

    def check(self) -> CheckResult:
        if self.identity_mismatch:
            assert self.identity is not None
            other = f"{self.identity.namespace}/{self.identity.pod_name}"
            return CheckResult(False, f"the node's Comment names pod {other}, not this pod")
        if self.method == "node_state":
            return CheckResult(True, "slurmd serves no /readyz here: judged by its registration")
        if self.method == "unknown" or self.answer is None:
            # nothing learnt yet (slurmd not up, or not asked): the registration check decides
            return CheckResult(True, "slurmd's /readyz not asked yet")
        said = f"; slurmd says: {self.words}" if self.words and not self.answer.ok else ""
        return CheckResult(self.answer.ok, f"slurmd /readyz: {self.answer.detail}{said}")

    def as_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "detail": self.answer.detail if self.answer else None,
            "ok": self.answer.ok if self.answer else None,
            "words": self.words,
            "no_words": self.degraded,
            "pod_identity": self.identity.as_json() if self.identity else None,
        }
