"""The HTTP face every daemon has: /livez, /readyz, /metrics, /status, plus role-specific routes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from sidecars.runtime.health import Checks

StatusFn = Callable[[], Awaitable[dict[str, Any]] | dict[str, Any]]


@dataclass
class DaemonHTTP:
    """The standard endpoints over a role's checks, metrics registry and status."""

    registry: CollectorRegistry
    liveness: Checks = field(default_factory=Checks)
    readiness: Checks = field(default_factory=Checks)
    status: StatusFn | None = None

    async def _probe(self, checks: Checks) -> web.Response:
        ok, results = await checks.run()
        body = {"ok": ok, "checks": {name: r.as_json() for name, r in results.items()}}
        return web.json_response(body, status=200 if ok else 503)

    async def livez(self, _: web.Request) -> web.Response:
        return await self._probe(self.liveness)

    async def readyz(self, _: web.Request) -> web.Response:
        return await self._probe(self.readiness)

    async def metrics(self, _: web.Request) -> web.Response:
        resp = web.Response(body=generate_latest(self.registry))
        resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        resp.charset = "utf-8"
        return resp

    async def status_view(self, _: web.Request) -> web.Response:
        if self.status is None:
            return web.json_response({})
        value = self.status()
        if not isinstance(value, dict):
            value = await value
        return web.json_response(value)

    def app(self, client_max_size: int = 64 * 1024) -> web.Application:
        app = web.Application(client_max_size=client_max_size)
        app.router.add_get("/livez", self.livez)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/status", self.status_view)
        return app


@contextlib.asynccontextmanager
async def serve(app: web.Application, host: str, port: int) -> AsyncIterator[int]:
    """Serve `app` on host:port for the duration of the block; yields the bound port (0 picks one)."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        bound = sockets[0].getsockname()[1] if sockets else port
        yield int(bound)
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def serve_unix(app: web.Application, path: str) -> AsyncIterator[str]:
    """Serve `app` on a unix socket (the worker agent's drain-hook socket), mode 0600."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        site = web.UnixSite(runner, path)
        await site.start()
        os.chmod(path, 0o600)
        yield path
    finally:
        await runner.cleanup()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
