"""The HTTP face every daemon has: /livez, /readyz, /metrics, /status, plus role-specific routes.

Every server is bounded (`ServerLimits`), whoever connects: a client that opens connections and
never finishes its headers, or its body, is cut off within seconds and holds no more than its share
of a capped number of connections. aiohttp times the headers of a request and an idle keep-alive
with one clock (its keep-alive timeout, which starts when the connection opens and again after
each answer), so `header_seconds` is both; the body is read under its own deadline before any
handler runs.
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from sidecars.runtime.health import Checks
from sidecars.runtime.settings import ConfigError, Conv, declared, flag, number, seconds, setting
from sidecars.runtime.waits import within

StatusFn = Callable[[], Awaitable[dict[str, Any]] | dict[str, Any]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@declared()
class ServerLimits:
    # request line and headers, and an idle keep-alive connection
    header_seconds: float = setting(
        default=10.0,
        flag="--http-header-seconds",
        conv=seconds(),
        help="a request's headers must arrive within this; also how long an idle connection is kept",
    )
    body_seconds: float = setting(
        # the whole request body, once the headers are in
        default=10.0,
        flag="--http-body-seconds",
        conv=seconds(),
        help="a request's body must arrive within this",
    )
    max_connections: int = setting(
        # open at once; more are closed at once (1,000 agents long-poll)
        default=4096,
        flag="--http-max-connections",
        conv=number(unit="connections"),
        help="open connections at most; more are closed",
    )


def configure_tls(parser: argparse.ArgumentParser) -> None:
    """Optional TLS for a server, from a mounted Secret (kubernetes.io/tls: tls.crt, tls.key)."""
    flag(parser, "--tls-cert-file", default=None, help="serve HTTPS with this certificate (PEM, chain first)")
    flag(parser, "--tls-key-file", default=None, help="the certificate's private key (PEM)")


def tls_from(args: argparse.Namespace) -> ssl.SSLContext | None:
    """A server context from --tls-cert-file and --tls-key-file (both or neither); ConfigError when
    they cannot be loaded, so a broken Secret stops the start, not the first client."""
    cert, key = args.tls_cert_file or None, args.tls_key_file or None
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise ConfigError("--tls-cert-file and --tls-key-file go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--tls-cert-file/--tls-key-file: cannot load {cert} and {key}: {exc}") from None
    return context


def client_tls(ca_file: str | None, what: str = "--ca-file") -> ssl.SSLContext | None:
    """A client context trusting `ca_file` (None: the system's roots, aiohttp's default)."""
    if not ca_file:
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{what}: cannot load {ca_file}: {exc}") from None


CA_FILE = Conv(client_tls, lambda _: "", "FILE")  # a client context trusting the file's CAs


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def bearer_required(paths: frozenset[str], *tokens: str, who: str = "the viewer's") -> Middleware:
    """A middleware that answers 401 to a request for one of `paths` without `Bearer <token>` of
    one of `tokens` (each compared in constant time, all of them every time)."""
    wanted = [f"Bearer {token}".encode() for token in tokens]

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in paths:
            given = request.headers.get("Authorization", "").encode("utf-8", "replace")
            if not sum(hmac.compare_digest(given, w) for w in wanted):
                return _error(401, f"missing or wrong bearer token ({who})")
        return await handler(request)

    return check


def body_deadline(seconds: float, max_size: int) -> Middleware:
    """A middleware that reads a request's whole body within `seconds`, before its handler runs
    (which then gets it from aiohttp's copy); a body that is late is answered 408 and its
    connection closed."""

    @web.middleware
    async def read_body(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.body_exists:
            try:
                await within(request.read(), seconds)
            except TimeoutError:
                resp = _error(408, f"request body not received within {seconds:g}s")
                resp.force_close()
                return resp
            except web.HTTPRequestEntityTooLarge:
                return _error(413, f"request body larger than {max_size} bytes")
        return await handler(request)

    return read_body


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

    def app(self, client_max_size: int = 64 * 1024, limits: ServerLimits | None = None) -> web.Application:
        limits = limits or ServerLimits()
        app = web.Application(
            client_max_size=client_max_size, middlewares=[body_deadline(limits.body_seconds, client_max_size)]
        )
        app.router.add_get("/livez", self.livez)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/status", self.status_view)
        return app


LINGER_SECONDS = 1.0  # after an answer to an unread body, so the client reads it before the close


def _runner(app: web.Application, limits: ServerLimits) -> web.AppRunner:
    return web.AppRunner(
        app,
        access_log=None,
        shutdown_timeout=1.0,
        keepalive_timeout=limits.header_seconds,
        lingering_time=min(LINGER_SECONDS, limits.body_seconds),  # aiohttp's 10 s would be a slow body's
    )


def _cap_connections(runner: web.AppRunner, limit: int) -> None:
    """Close a connection at once when `limit` are open already (the others keep being served)."""
    server = runner.server
    assert server is not None, "the runner is set up"
    admit = server.connection_made

    def connection_made(handler: Any, transport: Any) -> None:
        if len(server.connections) >= limit:
            transport.close()
            return
        admit(handler, transport)

    server.connection_made = connection_made  # type: ignore[method-assign]


@contextlib.asynccontextmanager
async def serve(
    app: web.Application,
    host: str,
    port: int,
    limits: ServerLimits | None = None,
    tls: ssl.SSLContext | None = None,
) -> AsyncIterator[int]:
    """Serve `app` on host:port for the duration of the block; yields the bound port (0 picks one)."""
    limits = limits or ServerLimits()
    runner = _runner(app, limits)
    await runner.setup()
    _cap_connections(runner, limits.max_connections)
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=tls)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        bound = sockets[0].getsockname()[1] if sockets else port
        yield int(bound)
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def serve_unix(
    app: web.Application, path: str, limits: ServerLimits | None = None
) -> AsyncIterator[str]:
    """Serve `app` on a unix socket (the worker agent's drain-hook socket), mode 0600."""
    limits = limits or ServerLimits()
    runner = _runner(app, limits)
    await runner.setup()
    _cap_connections(runner, limits.max_connections)
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
