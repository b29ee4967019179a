"""HA controllers: one config-sync per controller pod, and only one of them writes.

Who writes is Slurm's own answer, not a Lease: the config-sync whose own slurmctld is in control
(asked alone, as `probe controller` asks: sidecars/slurm/standby.py). Slurm already guarantees one
controller in control (a takeover shuts down the ones before it), a Lease could name a pod whose
controller is a standby, and Kubernetes being unreachable must not stop a change Slurm can take.
When no controller is in control (the `SlurmctldTimeout` window of a takeover), nobody writes.

The others never reconfigure anything: a standby refuses every request but a ping, and reads its
configuration directory only when it takes control (measured on 24.11 and 26.05: `scontrol
reconfigure` of the primary does not reach it). So what a standby "runs" is the set on its disk,
and it stages there only a set the writer reports verified (its /status, asked over HTTP): one its
own sources hold and its own validation passed. A set that only a live slurmctld could refuse
therefore never waits on a standby's disk for a takeover.
"""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from sidecars.protocol.configsync import HaRole
from sidecars.runtime import tlsroots
from sidecars.runtime.waits import all_of
from sidecars.slurm.standby import ask_alone

log = structlog.get_logger(__name__)

ASK_SECONDS = 10.0  # one controller asked alone: a ping and one request
PEER_SECONDS = 3.0  # one peer's /status
PEER_BODY_BYTES = 256 * 1024  # a /status is small; a peer that sends more is not read further
# a controller's name as slurm.conf's SlurmctldHost gives it (a host name): it reaches logs, Events
# and /status, so one line, bounded, of a host name's characters
CONTROLLER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class Peer:
    """What another controller pod's config-sync said of itself (or why it said nothing)."""

    url: str
    controller: str | None = None
    role: HaRole | None = None
    applied_sha256: str | None = None
    pending: bool = False
    error: str | None = None
    stands_down: str | None = None  # the controller its returning pod asked to shut down (ha/return_gate.py)


def _peer_from(url: str, body: Any) -> Peer:
    """A peer's /status, checked: anything malformed is an error, never a set to stage."""
    if not isinstance(body, dict):
        return Peer(url, error="its /status is not a JSON object")
    ha, applied = body.get("ha"), body.get("applied")
    if not isinstance(ha, dict):
        return Peer(url, error="it runs without --peer (its /status has no ha part)")
    sha = applied.get("sha256") if isinstance(applied, dict) else None
    role, controller = ha.get("role"), ha.get("controller")
    if (
        role not in tuple(HaRole)
        or not isinstance(controller, str)
        or not CONTROLLER_NAME.fullmatch(controller)
        or (sha is not None and not (isinstance(sha, str) and SHA256_HEX.fullmatch(sha)))
    ):
        return Peer(url, error="its /status does not have the expected shape")
    back = ha.get("return")
    down = back.get("stands_down") if isinstance(back, dict) else None
    if down is not None and not (isinstance(down, str) and CONTROLLER_NAME.fullmatch(down)):
        return Peer(url, error="its /status does not have the expected shape")
    return Peer(url, controller, HaRole(role), sha, bool(body.get("pending")), stands_down=down)


class HaMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.role = Gauge(
            "slurm_sidecars_config_ha_role",
            "1 for the role of this pod's slurmctld as last asked (only 'in control' applies changes)",
            ["role"],
            registry=registry,
        )
        self.in_step = Gauge(
            "slurm_sidecars_config_ha_in_step",
            "1 when every peer config-sync reports the set this one holds",
            registry=registry,
        )
        self.moves = Counter(
            "slurm_sidecars_config_ha_role_changes",
            "Times this pod's slurmctld changed role (a takeover, a start or a stop)",
            registry=registry,
        )
        self.rollout = Gauge(  # set by ha/rollout.py
            "slurm_sidecars_config_ha_rollout",
            "1 for where the set this pod holds stands: on every controller pod (everywhere), staging "
            "on some, or not everywhere after --ha-catch-up-seconds",
            ["state"],
            registry=registry,
        )
        self.staged = Counter(
            "slurm_sidecars_config_ha_staged",
            "Sets staged as a standby, after the writer reported them verified",
            registry=registry,
        )


class Coordination:
    """This config-sync's place among the controller pods: its controller's role, and its peers."""

    def __init__(
        self,
        controller: str,
        peers: tuple[str, ...],
        registry: CollectorRegistry,
        *,
        env: Mapping[str, str] | None = None,
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.controller = controller
        self.peer_urls = peers
        self.env = env
        self.token = token
        self.tls = tls  # https peers: --peer-ca-file's CAs (None: the system's); checked either way
        self.metrics = HaMetrics(registry)
        self.role = HaRole.UNKNOWN
        self.role_detail = "not asked yet"
        self.moves = 0  # role changes seen: a rollback judged under one role is judged again under another
        self.peers: list[Peer] = []
        self.waiting_for: str | None = None  # a validated set a standby holds back until the writer runs it
        self.waiting_why: str | None = None
        for r in HaRole:
            self.metrics.role.labels(role=r).set(0)

    @property
    def writes(self) -> bool:
        return self.role == HaRole.IN_CONTROL

    async def refresh_role(self) -> HaRole:
        """Ask this pod's slurmctld, alone, what it is now."""
        try:
            answer = await ask_alone(self.controller, ASK_SECONDS, self.env)
            role, detail = answer.role, answer.detail
        except (OSError, ValueError) as exc:  # no readable slurm.conf, or it does not name us
            role, detail = HaRole.UNKNOWN, str(exc)
        if role != self.role:
            if self.role != HaRole.UNKNOWN or self.moves:
                log.info("ha_role_changed", controller=self.controller, was=self.role, now=role)
            self.moves += 1
            self.metrics.moves.inc()
            self.metrics.role.labels(role=self.role).set(0)
        self.role, self.role_detail = role, detail
        self.metrics.role.labels(role=role).set(1)
        return role

    async def _ask(self, session: aiohttp.ClientSession, url: str) -> Peer:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            async with session.get(f"{url.rstrip('/')}/status", headers=headers) as r:
                if r.status != 200:
                    return Peer(url, error=f"/status answered {r.status}")
                raw = bytearray()
                async for chunk in r.content.iter_chunked(64 * 1024):
                    raw += chunk
                    if len(raw) > PEER_BODY_BYTES:
                        return Peer(url, error=f"/status larger than {PEER_BODY_BYTES} bytes")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return Peer(url, error=f"unreachable: {exc or type(exc).__name__}")
        try:
            body = json.loads(raw)
        except ValueError:
            return Peer(url, error="/status is not JSON")
        return _peer_from(url, body)

    async def refresh_peers(self) -> list[Peer]:
        timeout = aiohttp.ClientTimeout(total=PEER_SECONDS)
        # aiohttp's own default holds no roots here (runtime.tlsroots): the system's, loaded if used
        https = any(u.lower().startswith("https:") for u in self.peer_urls)
        tls = tlsroots.client_context("https:" if https else "http:", self.tls)
        connector = aiohttp.TCPConnector(ssl=tls)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            self.peers = list(await all_of(*(self._ask(session, u) for u in self.peer_urls)))
        return self.peers

    def writer(self) -> tuple[Peer | None, str]:
        """The peer beside the controller in control, or why there is none to follow."""
        in_control = [p for p in self.peers if p.role == HaRole.IN_CONTROL]
        if len(in_control) == 1:
            return in_control[0], ""
        if in_control:  # stale answers across a takeover: wait for one
            return None, "several peers say their controller is in control"
        silent = [p for p in self.peers if p.error]
        why = "no peer's controller is in control"
        if silent:
            why += "; " + "; ".join(f"{p.url}: {p.error}" for p in silent)
        return None, why

    def behind(self, sha: str) -> list[str]:
        """Each peer that does not hold `sha` (as last asked), with why: what it holds instead, or
        why its answer did not count."""
        heard = {p.url: p for p in self.peers}
        out: list[str] = []
        for url in self.peer_urls:
            p = heard.get(url)
            if p is None:
                out.append(f"{url}: not asked yet")
            elif p.error is not None:
                out.append(f"{url}: {p.error}")
            elif p.applied_sha256 != sha:
                held = p.applied_sha256[:12] if p.applied_sha256 else "no set"
                pending = ", a change pending" if p.pending else ""
                out.append(f"{p.controller} ({p.role}): holds {held}{pending}")
        return out

    def in_step(self, sha: str | None) -> bool:
        """Every peer answered and holds `sha` (a down controller's pod included: its disk is what
        its slurmctld reads at its next start)."""
        answered = len(self.peers) == len(self.peer_urls)  # none heard yet is not "all agree"
        ok = (
            answered
            and sha is not None
            and all(p.error is None and p.applied_sha256 == sha for p in self.peers)
        )
        self.metrics.in_step.set(1 if ok else 0)
        return ok

    def readiness(self, sha: str | None) -> tuple[bool, str]:
        """For /readyz: a standby is ready (its pod holds a verified set); the words say where it
        stands, so a probe's answer tells a waiting standby from one in step."""
        if self.in_step(sha):
            where = "every peer holds this set"
        else:
            where = self.waiting_why or "not every peer said it holds this set"
        return True, f"{self.role}{' (writes)' if self.writes else ''}; {where}"

    def status(self, sha: str | None) -> dict[str, Any]:
        return {
            "controller": self.controller,
            "role": self.role,
            "role_detail": self.role_detail,
            "writer": self.writes,
            "in_step": self.in_step(sha),
            "waiting_for": self.waiting_for,
            "waiting_why": self.waiting_why,
            "peers": [asdict(p) for p in self.peers],
        }
