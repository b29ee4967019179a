"""Who gets a connection to one of our servers, and for how long it may say nothing.

Every accepted connection passes a gate before aiohttp sees it: at most `max_connections` open at
once, at most `max_connections_per_source` from one peer address (so one pod holding idle sockets
cannot lock everyone else out), and the first request's line and headers must be in within
`first_request_seconds` (a socket that sends nothing is closed; aiohttp's own clock would give it
the whole keep-alive bound). A refused connection is closed before aiohttp makes a request handler
for it: nothing is started for it, so nothing can fail for it in the logs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger(__name__)

END_OF_HEADERS = (b"\r\n\r\n", b"\n\n")  # the blank line; aiohttp's parser takes a bare LF too
LOCAL = "local"  # the source of every connection on a unix socket (it has no peer address)


def source_of(transport: asyncio.BaseTransport) -> str:
    """The peer's address without its port; one name for every unix-socket peer."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer and isinstance(peer[0], str):
        return peer[0]
    return LOCAL


@dataclass
class ConnectionGate:
    """A protocol factory in front of aiohttp's: counts open connections, in all and per source."""

    handler_factory: Callable[[], asyncio.Protocol]
    max_connections: int
    max_connections_per_source: int
    first_request_seconds: float
    open_by_source: dict[str, int] = field(default_factory=dict)
    refused: int = 0  # since start: how many connections were closed at once
    timed_out: int = 0  # since start: how many said nothing (or too little) in time

    @property
    def open(self) -> int:
        return sum(self.open_by_source.values())

    def __call__(self) -> asyncio.Protocol:
        return _Gated(self)

    def admit(self, source: str) -> bool:
        held = self.open_by_source.get(source, 0)
        if self.open >= self.max_connections or held >= self.max_connections_per_source:
            self.refused += 1
            return False
        self.open_by_source[source] = held + 1
        return True

    def release(self, source: str) -> None:
        left = self.open_by_source.get(source, 0) - 1
        if left > 0:
            self.open_by_source[source] = left
        else:
            self.open_by_source.pop(source, None)


class _Gated(asyncio.Protocol):
    """One connection: refused at once, or handed to aiohttp's handler with a first-request clock."""

    def __init__(self, gate: ConnectionGate) -> None:
        self._gate = gate
        self._inner: asyncio.Protocol | None = None
        self._source = LOCAL
        self._transport: asyncio.BaseTransport | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._tail = b""  # the last bytes seen before the first request's headers ended

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._source = source_of(transport)
        if not self._gate.admit(self._source):
            log.debug("http_connection_refused", source=self._source, open=self._gate.open)
            transport.close()
            return
        self._transport = transport
        self._deadline = asyncio.get_running_loop().call_later(
            self._gate.first_request_seconds, self._first_request_late
        )
        self._inner = self._gate.handler_factory()
        self._inner.connection_made(transport)

    def _first_request_late(self) -> None:
        self._deadline = None
        self._gate.timed_out += 1
        log.debug("http_first_request_late", source=self._source)
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if self._deadline is not None:
            # the first request's headers end at the first blank line; kept: 3 bytes, not the stream
            seen = self._tail + data
            if any(end in seen for end in END_OF_HEADERS):
                self._deadline.cancel()
                self._deadline = None
            else:
                self._tail = seen[-3:]
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._inner is None:
            return  # refused: never counted, nothing started
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._gate.release(self._source)
        inner, self._inner, self._transport = self._inner, None, None
        inner.connection_lost(exc)
