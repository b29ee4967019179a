"""The HTTP face every daemon has: /livez, /readyz, /metrics, /status, plus role-specific routes.

Every server is bounded (`ServerLimits`), whoever connects: a client that opens connections and
never finishes its headers, or its body, is cut off within seconds and holds no more than its share
of a capped number of connections, and no more than its source's share (`http_gate`). The first
request must be in within `first_request_seconds`; after that aiohttp times the headers of a
request and an idle keep-alive with one clock (its keep-alive timeout, started again after each
answer), so `header_seconds` is both. A body is read under its own deadline, only after every other
middleware (authentication first) let the request through, only for a route that takes one, and
only while the bytes of all bodies being read stay within `inflight_body_bytes`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import ipaddress
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from sidecars.runtime.checks import Checks
from sidecars.runtime.http_gate import ConnectionGate
from sidecars.runtime.settings import (
    PATH,
    ConfigError,
    Conv,
    add_flags,
    declared,
    duration,
    number,
    setting,
    settings_from,
)
from sidecars.runtime.waits import within

StatusFn = Callable[[], Awaitable[dict[str, Any]] | dict[str, Any]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@declared()
class ServerLimits:
    """How much any client may hold of a server. A role takes it as a group with the prefix "http"
    (`settings_of(..., prefix="http")`): `header_seconds` is `--http-header-seconds`."""

    # request line and headers, and an idle keep-alive connection
    header_seconds: float = duration(
        10.0, "a request's headers must arrive within this; also how long an idle connection is kept"
    )
    # the whole request body, once the headers are in
    body_seconds: float = duration(10.0, "a request's body must arrive within this")
    # open at once; more are closed at once (1,000 agents long-poll)
    max_connections: int = setting(
        default=4096, conv=number(unit="connections"), help="open connections at most; more are closed"
    )
    # from one peer address: a pod holding idle sockets takes its share, not everyone's (a proxy in
    # front, such as an ingress to the web page, is one source for all behind it)
    max_connections_per_source: int = setting(
        default=64,
        conv=number(unit="connections"),
        help="open connections from one peer address at most; more are closed",
    )
    # a new connection's first request line and headers (and, with TLS, its handshake)
    first_request_seconds: float = duration(
        5.0, "a new connection's first request headers must arrive within this; else it is closed"
    )
    # request bodies being read at once, all requests together (two whole plans)
    inflight_body_bytes: int = setting(
        default=32 * 1024 * 1024,
        conv=number(unit="bytes"),
        help="bytes of request bodies read at once, all requests together; more is answered 503",
    )


@declared()
class ServerTlsFiles:
    """Optional TLS for a server, from a mounted Secret (kubernetes.io/tls: tls.crt, tls.key)."""

    cert_file: Path | None = setting(
        default=None,
        flag="--tls-cert-file",
        conv=PATH,
        help="serve HTTPS with this certificate (PEM, chain first)",
    )
    key_file: Path | None = setting(
        default=None, flag="--tls-key-file", conv=PATH, help="the certificate's private key (PEM)"
    )


def configure_tls(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, ServerTlsFiles)


def tls_from(args: argparse.Namespace) -> ssl.SSLContext | None:
    """A server context from --tls-cert-file and --tls-key-file (both or neither); ConfigError when
    they cannot be loaded, so a broken Secret stops the start, not the first client."""
    files = settings_from(ServerTlsFiles, args)
    cert, key = files.cert_file, files.key_file
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


def _closing(resp: web.Response) -> web.Response:
    resp.force_close()  # what is left of the body is never read: the connection goes with it
    return resp


def bearer_required(paths: frozenset[str], *tokens: str, who: str = "the viewer's") -> Middleware:
    """A middleware that answers 401 to a request for one of `paths` without `Bearer <token>` of
    one of `tokens` (each compared in constant time, all of them every time), and closes the
    connection: a body sent with the request is never read (`read_bodies` runs after this)."""
    wanted = [f"Bearer {token}".encode() for token in tokens]

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in paths:
            given = request.headers.get("Authorization", "").encode("utf-8", "replace")
            if not sum(hmac.compare_digest(given, w) for w in wanted):
                return _closing(_error(401, f"missing or wrong bearer token ({who})"))
        return await handler(request)

    return check


def bearer_or_loopback(paths: frozenset[str], token: str | None, who: str = "the viewer's") -> Middleware:
    """`bearer_required` with `token`; without one, the paths answer loopback callers only (an exec
    into the pod, a port-forward), never a pod on the network."""
    if token is not None:
        return bearer_required(paths, token, who=who)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in paths and not _loopback(request.remote):
            return _closing(_error(401, f"served to loopback callers only without {who} token configured"))
        return await handler(request)

    return check


def _loopback(remote: str | None) -> bool:
    if remote is None:
        return False
    try:
        return ipaddress.ip_address(remote).is_loopback
    except ValueError:
        return False


MAX_BODY_BYTES: web.AppKey[int] = web.AppKey("max_body_bytes", int)  # the app's client_max_size
AIOHTTP_MAX_BODY_BYTES = 1024**2  # web.Application's client_max_size when none is given
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})  # the only ones whose body we read


def application(max_body_bytes: int, middlewares: list[Middleware] | None = None) -> web.Application:
    """An app whose bodies `serve` reads (at most `max_body_bytes` each), after its middlewares."""
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares or [])
    app[MAX_BODY_BYTES] = max_body_bytes
    return app


@dataclass
class BodyBudget:
    """The bytes of request bodies being read or held by handlers at once, all requests together."""

    limit_bytes: int
    held_bytes: int = 0

    def take(self, n: int) -> bool:
        if self.held_bytes + n > self.limit_bytes:
            return False
        self.held_bytes += n
        return True

    def give(self, n: int) -> None:
        self.held_bytes -= n


def read_bodies(limits: ServerLimits, max_size: int) -> Middleware:
    """The innermost middleware: reads a request's whole body within `limits.body_seconds`, before
    its handler runs (which then gets it from aiohttp's copy), once every middleware before it
    (authentication) has let it through. A body is read only for a route that takes one
    (POST, PUT, PATCH, DELETE to a route that exists); any other is left unread. One larger than
    `max_size` by its Content-Length is refused before a byte is read (413); one that does not fit
    in `limits.inflight_body_bytes` beside the bodies in flight is answered 503; one that is late
    is answered 408. Each of those closes its connection."""
    budget = BodyBudget(limits.inflight_body_bytes)
    seconds = limits.body_seconds

    @web.middleware
    async def read_body(request: web.Request, handler: Handler) -> web.StreamResponse:
        if (
            not request.body_exists
            or request.method not in BODY_METHODS
            or request.match_info.http_exception is not None
        ):
            return await handler(request)
        declared = request.content_length
        if declared is not None and declared > max_size:
            return _closing(_error(413, f"request body larger than {max_size} bytes"))
        reserved = max_size if declared is None else declared  # chunked: room for the most it may be
        if not budget.take(reserved):
            resp = _error(503, "too many request bodies in flight; try again")
            resp.headers["Retry-After"] = "1"
            return _closing(resp)
        try:
            try:
                await within(request.read(), seconds)
            except TimeoutError:
                return _closing(_error(408, f"request body not received within {seconds:g}s"))
            except web.HTTPRequestEntityTooLarge:
                return _closing(_error(413, f"request body larger than {max_size} bytes"))
            return await handler(request)
        finally:
            budget.give(reserved)

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

    def app(self, client_max_size: int = 64 * 1024) -> web.Application:
        app = application(client_max_size)
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


def _with_bodies(app: web.Application, limits: ServerLimits) -> None:
    """The body reader last: every middleware the role added (authentication) runs before it."""
    # an app not made by `application` has aiohttp's default size (1 MiB), which aiohttp enforces
    app.middlewares.append(read_bodies(limits, app.get(MAX_BODY_BYTES, AIOHTTP_MAX_BODY_BYTES)))


@contextlib.asynccontextmanager
async def _gated(app: web.Application, limits: ServerLimits) -> AsyncIterator[ConnectionGate]:
    """`app` set up, its body reader last, for the block; yields the gate every connection of the
    listener passes (the caller's listener: TCP or a unix socket)."""
    _with_bodies(app, limits)
    runner = _runner(app, limits)
    await runner.setup()
    try:
        server = runner.server
        assert server is not None, "the runner is set up"
        yield ConnectionGate(
            server, limits.max_connections, limits.max_connections_per_source, limits.first_request_seconds
        )
    finally:
        await runner.cleanup()


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
    async with _gated(app, limits) as gate:
        # our own listener, not a TCPSite: every connection passes the gate, and a TLS handshake
        # gets the first request's bound (asyncio's default would be 60 s)
        listener = await asyncio.get_running_loop().create_server(
            gate,
            host,
            port,
            reuse_address=True,
            ssl=tls,
            ssl_handshake_timeout=limits.first_request_seconds if tls is not None else None,
        )
        try:
            yield int(listener.sockets[0].getsockname()[1])
        finally:
            listener.close()


@contextlib.asynccontextmanager
async def serve_unix(
    app: web.Application, path: str, limits: ServerLimits | None = None
) -> AsyncIterator[str]:
    """Serve `app` on a unix socket (the worker agent's drain-hook socket), mode 0600."""
    async with _gated(app, limits or ServerLimits()) as gate:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        listener = await asyncio.get_running_loop().create_unix_server(gate, path)
        try:
            os.chmod(path, 0o600)
            yield path
        finally:
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
