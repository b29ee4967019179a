"""A slow client (slowloris) against one of our servers: headers a byte at a time, a body that never
ends, more connections than the cap; and the server's answer to a well-behaved client meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from sidecars.runtime.http import ServerLimits
from sidecars.runtime.waits import within

Opener = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
SMALL = ServerLimits(header_seconds=1.0, body_seconds=1.0, max_connections=8)
# for the cap alone: held connections that say nothing must outlive however long a loaded machine
# takes to open the next one (aiohttp closes an idle connection after the header bound, SMALL's 1 s,
# from its start; the first-request bound closes it too), or the next is served in a freed place
CAP = ServerLimits(header_seconds=120.0, body_seconds=120.0, max_connections=8, first_request_seconds=120.0)
SLACK_SECONDS = 5.0  # the hard limit of each wait below: the bound plus the loaded machine's slack


def tcp(port: int, tls: ssl.SSLContext | None = None) -> Opener:
    return lambda: asyncio.open_connection("127.0.0.1", port, ssl=tls)


def unix(path: str) -> Opener:
    return lambda: asyncio.open_unix_connection(path)


@contextlib.asynccontextmanager
async def opened(open_: Opener) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await open_()
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()


async def closed_by_server(reader: asyncio.StreamReader, bound: float) -> tuple[float, bytes]:
    """Read until the server closes: (seconds it took, what it said first)."""
    started = time.monotonic()
    said = b""
    # a reset, or a broken pipe when the server closes while a trickle is still writing: both are it
    # closing the connection
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while chunk := await within(reader.read(4096), bound + SLACK_SECONDS):
            said += chunk
    return time.monotonic() - started, said


async def answers(open_: Opener, path: str = "/livez") -> bytes:
    """A whole, well-behaved request: the status line of the answer."""
    async with opened(open_) as (reader, writer):
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        return (await within(reader.readline(), SLACK_SECONDS)).strip()


async def header_trickle(open_: Opener, limits: ServerLimits, ok_path: str = "/livez") -> None:
    """Headers a byte every 0.2 s, for ever: cut off within the header bound; others served."""
    async with opened(open_) as (reader, writer):

        async def trickle() -> None:
            for byte in b"GET /livez HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.2)

        dripping = asyncio.ensure_future(trickle())
        try:
            assert (await answers(open_, ok_path)).endswith(b"200 OK")  # served meanwhile
            took, said = await closed_by_server(reader, limits.header_seconds)
        finally:
            dripping.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError, ssl.SSLError):
                await dripping
        assert b"200" not in said
        assert took < limits.header_seconds + SLACK_SECONDS


async def body_never_ends(
    open_: Opener, limits: ServerLimits, path: str, ok_path: str = "/livez", token: str | None = None
) -> None:
    """A POST whose body never comes in full (from a caller holding `token`, when the path needs
    one: an anonymous body is never read): answered 408 within the body bound, then closed."""
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    async with opened(open_) as (reader, writer):
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{auth}"
            "Content-Length: 1000\r\n\r\n{".encode()
        )
        await writer.drain()
        took, said = await closed_by_server(reader, limits.body_seconds)
        assert said.startswith(b"HTTP/1.1 408"), said[:200]
        assert took < limits.body_seconds + SLACK_SECONDS
    assert (await answers(open_, ok_path)).endswith(b"200 OK")


async def over_the_cap(open_: Opener, limits: ServerLimits, ok_path: str = "/livez") -> None:
    """`max_connections` idle connections held: the next is closed at once; freed, all is served.
    The server's bounds must let the held ones wait that long (CAP's)."""
    assert limits.first_request_seconds >= CAP.first_request_seconds, "held ones would be closed meanwhile"
    assert limits.header_seconds >= CAP.header_seconds, "held ones would be closed meanwhile"
    async with contextlib.AsyncExitStack() as stack:
        # no wait for the server to take them: it accepts in the order they were opened, so the
        # held ones are counted before the next is
        for _ in range(limits.max_connections):
            await stack.enter_async_context(opened(open_))
        async with opened(open_) as (reader, writer):
            writer.write(f"GET {ok_path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            with contextlib.suppress(OSError):
                await writer.drain()
            _, said = await closed_by_server(reader, 0.0)
            assert said == b"", said[:200]
    for _ in range(50):  # the held ones close: the server notices and serves again
        with contextlib.suppress(OSError, AssertionError, TimeoutError):
            if (await answers(open_, ok_path)).endswith(b"200 OK"):
                return
        await asyncio.sleep(0.1)
    raise AssertionError("never served again after the held connections closed")
