"""A small, faithful stand-in for the control plane's node API (replaced by the real one at integration).

It reads the whole cluster from Slurm on an interval (one client of its own, its own metrics), keeps a
snapshot version that changes when anything changes, and serves, with `Authorization: Bearer <token>`:
`GET /v1/nodes/{name}?version=V&wait=S` (long poll; 404 for an unknown node),
`POST /v1/nodes/{name}/drain {"reason"}` → 202 (a drained node is left as it is),
`POST /v1/nodes/{name}/undrain {"reason"}` → 202 (only a drain whose reason is exactly that one),
`POST /v1/nodes/{name}/report {"pod_namespace","pod_name","registered","detail"}` → 204.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from sidecars.runtime.http import serve
from sidecars.runtime.waits import within
from sidecars.slurm import RetryPolicy, SlurmClient, SlurmError, SlurmMetrics
from tests.helpers import nodes_from_slurm


class FakeControlPlane:
    def __init__(self, env: Mapping[str, str], token: str, refresh: float = 0.2) -> None:
        self.client = SlurmClient(
            env=env, metrics=SlurmMetrics(CollectorRegistry()), retry=RetryPolicy(attempts=1, max_seconds=1.0)
        )
        self.token = token
        self.refresh = refresh
        self.version = 0
        self.nodes: dict[str, dict[str, Any]] = {}
        self.changed = asyncio.Condition()
        self.polls: Counter[str] = Counter()
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.url = ""

    async def _read(self) -> None:
        snap = {doc["name"]: doc for doc in await nodes_from_slurm(self.client)}
        if snap != self.nodes:
            async with self.changed:
                self.nodes = snap
                self.version += 1
                self.changed.notify_all()

    async def _refresher(self) -> None:
        while True:
            with contextlib.suppress(SlurmError):
                await self._read()
            await asyncio.sleep(self.refresh)

    def _auth(self, request: web.Request) -> None:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            raise web.HTTPUnauthorized(text="bad token")

    def _obj(self, name: str) -> dict[str, Any]:
        if name not in self.nodes:
            raise web.HTTPNotFound(text=f"no node {name}")
        return {**self.nodes[name], "version": self.version}

    async def get_node(self, request: web.Request) -> web.Response:
        self._auth(request)
        name = request.match_info["name"]
        self.polls[name] += 1
        wait = float(request.query.get("wait", "0"))
        seen = request.query.get("version")
        if seen is not None and int(seen) == self.version and wait > 0:
            async with self.changed:
                with contextlib.suppress(TimeoutError):
                    await within(self.changed.wait_for(lambda: self.version != int(seen)), wait)
        return web.json_response(self._obj(name))

    async def post(self, request: web.Request) -> web.Response:
        self._auth(request)
        name, action = request.match_info["name"], request.match_info["action"]
        body = await request.json()
        self.requests.append((name, action, body))
        if action == "report":
            return web.Response(status=204)
        node = await self.client.node(name)
        if node is None:
            raise web.HTTPNotFound(text=f"no node {name}")
        reason = node.reason.text if node.reason else ""
        # the control plane's contract (docs/control-plane.md): a drained node is left as it is;
        # an undrain clears only a drain whose reason is exactly the one given
        if action == "drain" and not node.state.drain:
            await self.client.drain([name], body["reason"])
        elif action == "undrain" and reason == body["reason"]:
            await (self.client.resume if node.state.base == "DOWN" else self.client.undrain)([name])
        elif action not in {"drain", "undrain"}:
            raise web.HTTPNotFound()
        return web.Response(status=202)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        app = web.Application()
        app.router.add_get("/v1/nodes/{name}", self.get_node)
        app.router.add_post("/v1/nodes/{name}/{action}", self.post)
        await self._read()
        task = asyncio.ensure_future(self._refresher())
        try:
            async with serve(app, "127.0.0.1", 0) as port:
                self.url = f"http://127.0.0.1:{port}"
                yield self.url
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
