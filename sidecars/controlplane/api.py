"""The control plane's HTTP API under /v1/ (bearer token, constant-time compare, bounded bodies).

Every input is validated and every refusal is a 4xx with `{"error": "..."}`. Writes are answered by
the Lease holder only; another replica answers 503 with a Retry-After and the holder's name.
"""

from __future__ import annotations

import hmac
import json
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog
from aiohttp import web

from sidecars.controlplane.drains import Action, DrainBatcher
from sidecars.controlplane.metrics import ControlPlaneMetrics
from sidecars.controlplane.openapi import document
from sidecars.controlplane.recycle import Recycler
from sidecars.controlplane.snapshot import FleetSnapshot, FleetView
from sidecars.slurm import REASON_PREFIX

log = structlog.get_logger(__name__)

MAX_BODY = 16 * 1024
MAX_REASON = 256
MAX_DETAIL = 1024
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")  # Slurm node names, Kubernetes names


class Leadership(Protocol):
    is_leader: bool
    holder: str | None


def _error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


class ControlPlaneAPI:
    def __init__(
        self,
        token: str,
        *,
        fleet: FleetView,
        drains: DrainBatcher,
        recycler: Recycler | None,
        leadership: Leadership,
        metrics: ControlPlaneMetrics,
        max_wait: float = 60.0,
    ) -> None:
        self._token = f"Bearer {token}".encode()
        self._fleet = fleet
        self._drains = drains
        self._recycler = recycler
        self._leader = leadership
        self._metrics = metrics
        self._max_wait = max_wait

    # ------------------------------------------------------------------ plumbing
    @web.middleware
    async def auth(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path.startswith("/v1/"):
            given = request.headers.get("Authorization", "").encode("utf-8", "replace")
            if not hmac.compare_digest(given, self._token):
                return _error(401, "missing or wrong bearer token")
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"request body larger than {MAX_BODY} bytes")

    def install(self, app: web.Application) -> None:
        app.middlewares.append(self.auth)
        r = app.router
        r.add_get("/v1/nodes", self.nodes)
        r.add_get("/v1/nodes/{name}", self.node)
        r.add_post("/v1/nodes/{name}/drain", self.drain)
        r.add_post("/v1/nodes/{name}/undrain", self.undrain)
        r.add_post("/v1/nodes/{name}/report", self.report)
        r.add_get("/v1/scale-in-order", self.scale_in_order)
        r.add_get("/v1/openapi.json", self.openapi)

    def _loaded(self) -> FleetSnapshot | web.Response:
        snap = self._fleet.snapshot
        if not snap.loaded:
            resp = _error(503, "no fleet view yet: Slurm has not been read", detail=snap.error)
            resp.headers["Retry-After"] = "1"
            return resp
        return snap

    @staticmethod
    def _name(request: web.Request) -> str | web.Response:
        name = request.match_info["name"]
        if not NAME.match(name):
            return _error(400, "invalid node name")
        return name

    @staticmethod
    async def _body(request: web.Request) -> dict[str, Any] | web.Response:
        if request.content_length is not None and request.content_length > MAX_BODY:
            return _error(413, f"request body larger than {MAX_BODY} bytes")
        raw = await request.read()
        if len(raw) > MAX_BODY:
            return _error(413, f"request body larger than {MAX_BODY} bytes")
        try:
            body = json.loads(raw or b"null")
        except (ValueError, UnicodeDecodeError):
            return _error(400, "body is not valid JSON")
        if not isinstance(body, dict):
            return _error(400, "body must be a JSON object")
        return body

    # ------------------------------------------------------------------ reads
    async def nodes(self, _: web.Request) -> web.Response:
        snap = self._loaded()
        if isinstance(snap, web.Response):
            return snap
        return web.json_response([n.as_json() for n in snap.nodes.values()])

    async def node(self, request: web.Request) -> web.Response:
        name = self._name(request)
        if isinstance(name, web.Response):
            return name
        q = request.query
        try:
            version = int(q["version"]) if "version" in q else None
            wait = float(q.get("wait", "0"))
        except ValueError:
            return _error(400, "version must be an integer and wait a number of seconds")
        if not math.isfinite(wait) or wait < 0:
            return _error(400, "wait must be a finite number of seconds >= 0")
        wait = min(wait, self._max_wait)
        snap = self._loaded()
        if isinstance(snap, web.Response):
            return snap
        if name not in snap.nodes:
            return _error(404, f"no node {name} in Slurm")
        if version is not None and wait > 0:
            self._metrics.long_polls.inc()
            try:
                snap = await self._fleet.wait_change(version, wait)
            finally:
                self._metrics.long_polls.dec()
        found = snap.nodes.get(name)
        if found is None:
            return _error(404, f"no node {name} in Slurm")
        return web.json_response({**found.as_json(), "version": snap.version})

    async def scale_in_order(self, _: web.Request) -> web.Response:
        snap = self._loaded()
        if isinstance(snap, web.Response):
            return snap
        return web.json_response(list(snap.order))

    async def openapi(self, _: web.Request) -> web.Response:
        return web.json_response(document())

    # ------------------------------------------------------------------ writes
    def _not_leader(self) -> web.Response | None:
        if self._leader.is_leader:
            return None
        resp = _error(503, "not the leader: writes go to the Lease holder", leader=self._leader.holder)
        resp.headers["Retry-After"] = "1"
        return resp

    async def _drain_like(self, request: web.Request, action: Action) -> web.Response:
        name = self._name(request)
        if isinstance(name, web.Response):
            return name
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        reason = body.get("reason")
        if not isinstance(reason, str) or not reason.startswith(REASON_PREFIX):
            return _error(422, f"reason must be a string starting with {REASON_PREFIX!r}")
        if len(reason) > MAX_REASON or any(ord(c) < 32 for c in reason):
            return _error(422, f"reason must be at most {MAX_REASON} printable characters")
        snap = self._loaded()
        if isinstance(snap, web.Response):
            return snap
        if name not in snap.nodes:
            return _error(404, f"no node {name} in Slurm")
        refused = self._not_leader()
        if refused is not None:
            return refused
        self._drains.submit(name, action, reason)
        return web.json_response({"node": name, "action": action, "queued": True}, status=202)

    async def drain(self, request: web.Request) -> web.Response:
        return await self._drain_like(request, "drain")

    async def undrain(self, request: web.Request) -> web.Response:
        return await self._drain_like(request, "undrain")

    async def report(self, request: web.Request) -> web.Response:
        name = self._name(request)  # the node may well be absent from Slurm: that is what is reported
        if isinstance(name, web.Response):
            return name
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        ns, pod, registered = body.get("pod_namespace"), body.get("pod_name"), body.get("registered")
        detail = body.get("detail", "")
        if not (isinstance(ns, str) and NAME.match(ns) and isinstance(pod, str) and NAME.match(pod)):
            return _error(422, "pod_namespace and pod_name must be Kubernetes names")
        if not isinstance(registered, bool):
            return _error(422, "registered must be true or false")
        if not isinstance(detail, str) or len(detail) > MAX_DETAIL:
            return _error(422, f"detail must be a string of at most {MAX_DETAIL} characters")
        if self._recycler is not None:
            self._recycler.report(ns, pod, registered, detail)
        log.info("agent_report", node=name, pod=pod, registered=registered, detail=detail)
        return web.Response(status=204)
