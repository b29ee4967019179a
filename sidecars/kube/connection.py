"""How every call reaches the API server: one ApiClient per process, each call with a deadline,
counted, fenced when it writes, and its transient failures retried (this is the Kubernetes edge's
one place for tenacity); watches with read deadlines and bookmarks.

Retried: 429 (throttled), 5xx and connection errors, for every call; 409 for pod patches (a
concurrent writer; a strategic-merge patch of annotations applies cleanly on the next try). A 409
on a Lease is not retried: it means another replica wrote first, and the caller must re-read.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

import aiohttp
import structlog
from kubernetes_asyncio import client as k
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from sidecars.kube.errors import Fenced, KubeError, WatchSilent
from sidecars.runtime.waits import within

log = structlog.get_logger(__name__)

T = TypeVar("T")
W = TypeVar("W")
RETRYABLE = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class KubeRetry:
    attempts: int = 5
    max_seconds: float = 20.0
    initial_wait: float = 0.1
    max_wait: float = 3.0
    # one attempt's deadline: a request on a half-open connection would otherwise wait for ever
    # (kubernetes-asyncio sets none), and with it a leader's renewal and its step-down deadline
    call_seconds: float = 30.0


# what a replica may send without holding the Lease: reads, and the Lease itself (how it is won)
UNFENCED_PREFIXES = ("get_", "list_", "watch_", "read_")
UNFENCED = frozenset({"create_lease", "update_lease"})


WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def is_write(operation: str) -> bool:
    return not operation.startswith(UNFENCED_PREFIXES) and operation not in UNFENCED


def _error(operation: str, exc: ApiException) -> KubeError:
    return KubeError(operation, int(exc.status or 0), str(exc.reason or ""))


def _bookmark(event: Mapping[str, Any]) -> str:
    """A BOOKMARK event's resourceVersion (kubernetes-asyncio leaves its object a plain dict)."""
    obj = event.get("raw_object") or event.get("object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""


def _retryable(exc: BaseException, conflict_too: bool) -> bool:
    if isinstance(exc, ApiException):
        return exc.status in RETRYABLE or (conflict_too and exc.status == 409)
    return isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError)


KEEPALIVE_IDLE_SECONDS, KEEPALIVE_INTERVAL_SECONDS, KEEPALIVE_PROBES = 30, 10, 3


def _keepalive_socket(addr: tuple[Any, ...]) -> socket.socket:
    """A TCP socket with keepalive: a peer gone without a word (a NAT entry dropped, an API server
    failed over) is found within about a minute, not after the kernel's two hours."""
    family, kind, proto = addr[0], addr[1], addr[2]
    sock = socket.socket(family=family, type=kind, proto=proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):  # Linux; elsewhere the system's defaults apply
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_SECONDS)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_SECONDS)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)
    return sock


def _keep_alive(api: k.ApiClient) -> None:
    # kubernetes-asyncio builds its connector itself and takes no socket options: its socket
    # factory (aiohttp >= 3.12) is set before the first connection is made
    connector = api.rest_client.pool_manager.connector
    if not isinstance(connector, aiohttp.TCPConnector) or not hasattr(connector, "_socket_factory"):
        raise RuntimeError("kubernetes-asyncio's connector takes no socket factory: no TCP keepalive")
    setattr(connector, "_socket_factory", _keepalive_socket)  # noqa: B010


@dataclass
class KubeConnection:
    """One ApiClient for the process and the API objects over it; `async with` closes it. The
    typed calls are `KubeClient`'s; `call` is this edge's way of making one more."""

    configuration: k.Configuration
    retry: KubeRetry = field(default_factory=KubeRetry)
    registry: CollectorRegistry | None = None
    # a watch that sends nothing for this long is given up (the API server sends a bookmark
    # about once a minute on a quiet watch; anything longer than that is a dead connection)
    watch_silence_seconds: float = 90.0
    # every write asks it first, at each attempt (a retry may come after the Lease is lost);
    # None: not fenced (the agents, config-sync)
    fence: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        self.api = k.ApiClient(self.configuration)
        _keep_alive(self.api)
        self.api.rest_client.pool_manager.trace_configs.append(self._late_fence())
        self.core = k.CoreV1Api(self.api)
        self.coordination = k.CoordinationV1Api(self.api)
        self.custom = k.CustomObjectsApi(self.api)
        self.apps = k.AppsV1Api(self.api)
        self.authentication = k.AuthenticationV1Api(self.api)
        self.requests: Counter | None = None
        if self.registry is not None:
            self.requests = Counter(
                "slurm_sidecars_kube_requests",
                "Kubernetes API calls by outcome",
                ["operation", "result"],
                registry=self.registry,
            )

    def _late_fence(self) -> aiohttp.TraceConfig:
        """The fence asked again once the connection is ready, right before the request goes out:
        a process frozen between the first ask and the send (SIGSTOP, a long pause) wakes up to
        this one. What is left is the instant between it and the socket write."""

        async def started(_: Any, ctx: Any, params: aiohttp.TraceRequestStartParams) -> None:
            ctx.write = params.method in WRITE_METHODS and "/leases" not in params.url.path

        async def connected(_: Any, ctx: Any, __: Any) -> None:
            if getattr(ctx, "write", False) and self.fence is not None and not self.fence():
                self._count("late", "fenced")
                raise Fenced("request")

        trace = aiohttp.TraceConfig()
        trace.on_request_start.append(started)
        trace.on_connection_create_end.append(connected)
        trace.on_connection_reuseconn.append(connected)
        trace.freeze()
        return trace

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.api.close()

    def _count(self, operation: str, result: str) -> None:
        if self.requests is not None:
            self.requests.labels(operation=operation, result=result).inc()

    async def _watch(
        self,
        operation: str,
        list_fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        resource_version: str,
        timeout_seconds: int,
        convert: Callable[[Any], W | None],
        bookmark: Callable[[str], W],
    ) -> AsyncIterator[tuple[str, W]]:
        """One watch from `resource_version`: (ADDED|MODIFIED|DELETED, object) until the server ends
        it, and (BOOKMARK, an object carrying only the version to resume from); a 410 raises.
        `list_fn` itself, not a wrapper: the watch reads the model to decode into from its docstring."""
        # deadlines on every watch: the whole request (the server ends it at timeout_seconds),
        # the connect, and each read (a quiet watch still gets bookmarks; silence is a dead line)
        deadline = aiohttp.ClientTimeout(
            total=timeout_seconds + self.retry.call_seconds,
            sock_connect=self.retry.call_seconds,
            sock_read=self.watch_silence_seconds,
        )
        async with watch.Watch() as w:
            stream = w.stream(
                list_fn,
                *args,
                **kwargs,
                resource_version=resource_version,
                timeout_seconds=timeout_seconds,
                allow_watch_bookmarks=True,
                _request_timeout=deadline,
            )
            try:
                async for event in stream:
                    kind = event["type"]
                    if kind in {"ADDED", "MODIFIED", "DELETED"}:
                        obj = convert(event["object"])
                        if obj is not None:
                            yield kind, obj
                    elif kind == "BOOKMARK" and (rv := _bookmark(event)):
                        yield kind, bookmark(rv)
            except ApiException as exc:
                raise _error(operation, exc) from exc
            except TimeoutError:
                self._count(operation, "silent")
                raise WatchSilent(operation, self.watch_silence_seconds) from None

    async def _found(self, operation: str, fn: Callable[[], Awaitable[T]]) -> T | None:
        """A read through `call`: None when the object is not there (404)."""
        try:
            return await self.call(operation, fn)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def call(self, operation: str, fn: Callable[[], Awaitable[T]], *, conflict_too: bool = False) -> T:
        """`fn()` (one request of kubernetes-asyncio's, named `operation` in metrics and logs) within
        the per-attempt deadline, fenced when it writes, its transient failures retried (`conflict_too`:
        a 409 as well, for a patch that merges cleanly over a concurrent writer); a refusal raises
        KubeError."""
        policy = self.retry

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            status = exc.status if isinstance(exc, ApiException) else type(exc).__name__
            self._count(operation, f"retry_{status}")
            log.info("kube_retry", operation=operation, status=status, attempt=state.attempt_number)

        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(lambda e: _retryable(e, conflict_too)),
                stop=stop_after_attempt(policy.attempts) | stop_after_delay(policy.max_seconds),
                wait=wait_random_exponential(multiplier=policy.initial_wait, max=policy.max_wait),
                before_sleep=before_sleep,
                reraise=True,
            ):
                with attempt:
                    if self.fence is not None and is_write(operation) and not self.fence():
                        self._count(operation, "fenced")
                        raise Fenced(operation)
                    try:
                        result = await within(fn(), policy.call_seconds)
                    except TimeoutError:
                        self._count(operation, "timeout")
                        raise
                    except ApiException as exc:
                        self._count(operation, str(exc.status))
                        raise
                    self._count(operation, "ok")
                    return result
        except ApiException as exc:
            raise _error(operation, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover
