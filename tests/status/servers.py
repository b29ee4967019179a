"""Small local servers that speak the control plane's `/v1` contract and config-sync's `/status`,
with the JSON shapes DESIGN.md fixes, so `status` is tested over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from sidecars.runtime.http import serve

NODES_KEY = web.AppKey("nodes", list)
ORDER_KEY = web.AppKey("order", list)
TOKEN_KEY = web.AppKey("token", str)
STATUS_KEY = web.AppKey("status", dict)
SEEN_KEY = web.AppKey("seen", list)


@web.middleware
async def _bearer(request: web.Request, handler: Any) -> web.StreamResponse:
    request.app[SEEN_KEY].append((request.path, request.headers.get("Authorization")))
    if request.path.startswith("/v1/") and request.headers.get("Authorization") != (
        f"Bearer {request.app[TOKEN_KEY]}"
    ):
        return web.json_response({"error": "unauthorized"}, status=401)
    return await handler(request)


def control_plane_app(token: str, nodes: list[dict[str, Any]], order: list[str]) -> web.Application:
    app = web.Application(middlewares=[_bearer])
    app[TOKEN_KEY], app[NODES_KEY], app[ORDER_KEY], app[SEEN_KEY] = token, nodes, order, []

    async def list_nodes(request: web.Request) -> web.Response:
        return web.json_response(request.app[NODES_KEY])

    async def scale_in_order(request: web.Request) -> web.Response:
        return web.json_response(request.app[ORDER_KEY])

    app.router.add_get("/v1/nodes", list_nodes)
    app.router.add_get("/v1/scale-in-order", scale_in_order)
    return app


def config_sync_app(status: dict[str, Any]) -> web.Application:
    app = web.Application()
    app[STATUS_KEY], app[SEEN_KEY] = status, []

    async def get_status(request: web.Request) -> web.Response:
        request.app[SEEN_KEY].append((request.path, None))
        return web.json_response(request.app[STATUS_KEY])

    app.router.add_get("/status", get_status)
    return app


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """Serve `app` on 127.0.0.1 at a free port; yields its base URL."""
    async with serve(app, "127.0.0.1", 0) as port:
        yield f"http://127.0.0.1:{port}"
