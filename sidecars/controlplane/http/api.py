"""The control plane's HTTP API under /v1/ (who may call what: `access`; bounded bodies).

Every input is checked against the schemas the OpenAPI document states (`schemacheck`), and every
refusal is a 4xx with `{"error": "..."}`, aiohttp's own (no such path, method not allowed) too.
Writes are answered by the Lease holder only; another replica answers 503 with a Retry-After and
the holder's name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass

import structlog
from aiohttp import web

from sidecars.controlplane.fleet.drains import Action, DrainBatcher
from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.controlplane.fleet.snapshot import FleetSnapshot, FleetView
from sidecars.controlplane.fleet.versions import AgentVersions
from sidecars.controlplane.http.access import CALLER, Access
from sidecars.controlplane.http.bodies import read_body
from sidecars.controlplane.http.errors import Leadership, error, not_leader
from sidecars.controlplane.http.openapi.document import (
    MAX_BODY,
    NAME_PARAM,
    REASON_BODY,
    REPORT_BODY,
    VERSION_SCHEMA,
    WAIT_SCHEMA,
    document,
)
from sidecars.controlplane.http.schemacheck import problem, query_value
from sidecars.controlplane.reconcile.recycle import Recycler

log = structlog.get_logger(__name__)


def _no_record(name: str) -> web.Response:
    """Slurm has no record of the node, in a shape no router or proxy 404 has (the agent's drain
    reads only this one as an answer, and confirms it with Slurm before it ends)."""
    return error(404, f"no node {name} in Slurm", node=name, slurm="no_record")


@dataclass(eq=False)
class ControlPlaneAPI:
    access: Access
    _: KW_ONLY
    fleet: FleetView
    drains: DrainBatcher
    recycler: Recycler | None
    leadership: Leadership
    metrics: ControlPlaneMetrics
    max_wait: float = 60.0
    versions: AgentVersions | None = None

    # ------------------------------------------------------------------ plumbing
    @web.middleware
    async def auth(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path.startswith("/v1/"):
            refused = await self.access.check(request)
            if refused is not None:
                if request.body_exists:  # never read (runtime.http reads bodies last): not kept either
                    refused.force_close()
                return refused
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return error(413, f"request body larger than {MAX_BODY} bytes")
        except web.HTTPException as exc:  # the router's 404 and 405, as JSON like every other refusal
            if exc.status < 400 or not request.path.startswith("/v1/"):
                raise
            resp = error(exc.status, exc.reason)
            if "Allow" in exc.headers:
                resp.headers["Allow"] = exc.headers["Allow"]
            return resp

    def install(self, app: web.Application) -> None:
        app.middlewares.append(self.auth)
        r = app.router
        # no HEAD: the document does not offer it (aiohttp would answer it for every GET)
        r.add_get("/v1/nodes", self.nodes, allow_head=False)
        r.add_get("/v1/nodes/{name}", self.node, allow_head=False)
        r.add_post("/v1/nodes/{name}/drain", self.drain)
        r.add_post("/v1/nodes/{name}/undrain", self.undrain)
        r.add_post("/v1/nodes/{name}/report", self.report)
        r.add_get("/v1/scale-in-order", self.scale_in_order, allow_head=False)
        r.add_get("/v1/openapi.json", self.openapi, allow_head=False)

    def _loaded(self) -> FleetSnapshot | web.Response:
        snap = self.fleet.snapshot
        if not snap.loaded:
            resp = error(503, "no fleet view yet: Slurm has not been read", detail=snap.error)
            resp.headers["Retry-After"] = "1"
            return resp
        return snap

    @staticmethod
    def _name(request: web.Request) -> str | web.Response:
        name = request.match_info["name"]
        refused = problem(NAME_PARAM["schema"], name, "node name")
        return error(400, refused) if refused else name

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
        version, wait = None, 0.0
        if "version" in q:
            value, refused = query_value(VERSION_SCHEMA, q["version"], "version")
            if refused or not isinstance(value, int):
                return error(400, refused or "version must be an integer")
            version = value
        if "wait" in q:
            value, refused = query_value(WAIT_SCHEMA, q["wait"], "wait (seconds)")
            if refused or not isinstance(value, float):
                return error(400, refused or "wait must be a number of seconds")
            wait = min(value, self.max_wait)
        snap = self._loaded()
        if isinstance(snap, web.Response):
            return snap
        if name not in snap.nodes:
            return _no_record(name)
        if version is not None and wait > 0:
            self.metrics.long_polls.inc()
            try:
                snap = await self.fleet.wait_change(version, wait)
            finally:
                self.metrics.long_polls.dec()
        found = snap.nodes.get(name)
        if found is None:
            return _no_record(name)
        return web.json_response({**found.as_json(), "version": snap.version})

    async def scale_in_order(self, _: web.Request) -> web.Response:
        snap = self._loaded()
        if isinstance(snap, web.Response):
            return snap
        return web.json_response(list(snap.order))

    async def openapi(self, _: web.Request) -> web.Response:
        return web.json_response(document(max_wait=self.max_wait))

    # ------------------------------------------------------------------ writes
    def _not_leader(self) -> web.Response | None:
        return not_leader(self.leadership)

    async def _drain_like(self, request: web.Request, action: Action) -> web.Response:
        name = self._name(request)
        if isinstance(name, web.Response):
            return name
        body = await read_body(request, REASON_BODY)
        if isinstance(body, web.Response):
            return body
        reason = body["reason"]
        not_for_agents = request[CALLER].reason_refusal(action, reason)
        if not_for_agents is not None:
            self.metrics.api_refusals.labels("agent", "403").inc()
            return error(403, not_for_agents)
        snap = self._loaded()
        if isinstance(snap, web.Response):
            return snap
        if name not in snap.nodes:
            return _no_record(name)
        refused = self._not_leader()
        if refused is not None:
            return refused
        self.drains.submit(name, action, reason)
        return web.json_response({"node": name, "action": action, "queued": True}, status=202)

    async def drain(self, request: web.Request) -> web.Response:
        return await self._drain_like(request, "drain")

    async def undrain(self, request: web.Request) -> web.Response:
        return await self._drain_like(request, "undrain")

    async def report(self, request: web.Request) -> web.Response:
        name = self._name(request)  # the node may well be absent from Slurm: that is what is reported
        if isinstance(name, web.Response):
            return name
        body = await read_body(request, REPORT_BODY)
        if isinstance(body, web.Response):
            return body
        ns, pod, detail = body["pod_namespace"], body["pod_name"], body["detail"]
        caller = request[CALLER]
        if caller.role == "agent" and (caller.namespace, caller.pod) != (ns, pod):
            self.metrics.api_refusals.labels("agent", "403").inc()
            return error(403, f"the agent of pod {caller.namespace}/{caller.pod} reports its own pod only")
        registered = body.get("registered")
        if registered is not None and self.recycler is not None:
            self.recycler.report(ns, pod, registered, detail)
        version = body.get("slurmd_version")
        if version is not None and self.versions is not None:
            self.versions.report(name, version)
        log.info("agent_report", node=name, pod=pod, registered=registered, detail=detail, slurmd=version)
        return web.Response(status=204)
