"""The hand-written reader of slurmrestd's replies (sidecars.slurm.restd) against a local server that
answers as we choose: 26.05's doubled reply is read as its first; a peer that sends endless headers,
an endless body or no HTTP at all costs a bounded read and a clear error, never a hang or a
memory spike. The real slurmrestd's replies are in tests/probe/test_restd.py."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from sidecars.slurm import restd

# what 26.05.5's slurmrestd sent for a request without a token (captured on this machine)
DOUBLED_401 = (
    b"HTTP/1.1 401 UNAUTHORIZED\r\nConnection: Close\r\nContent-Length: 22\r\n"
    b"Content-Type: text/plain\r\n\r\n"
    b"Authentication failureConnection: Close\r\nHTTP/1.1 401 UNAUTHORIZED\r\nConnection: Close\r\n"
    b"Content-Length: 22\r\nContent-Type: text/plain\r\n\r\nAuthentication failure"
)
PING_DOWN = (
    b'{"pings": [{"hostname": "ctld-a", "pinged": "DOWN", "responding": false, "mode": "primary"},'
    b' {"hostname": "ctld-b", "responding": false, "primary": false,'
    b' "status": "Protocol authentication error"}],'
    b' "errors": []}'
)
TIMEOUT_SECONDS = 30.0  # generous: the reads below end by their caps, not by this


@contextlib.asynccontextmanager
async def answering(reply: bytes, *, endless: bytes = b"") -> AsyncIterator[int]:
    """A server that reads one request's head and writes `reply`, then `endless` until the client
    goes (a hostile peer)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(reply)
            while endless:
                writer.write(endless)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def test_a_doubled_reply_is_read_as_its_first() -> None:
    async with answering(DOUBLED_401) as port:
        reply = await restd.get("127.0.0.1", port, "/readyz", {}, TIMEOUT_SECONDS)
    assert (reply.status, reply.body) == (401, b"Authentication failure")


async def test_a_ping_with_every_controller_down_names_each_and_slurms_reason() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(PING_DOWN)
    async with answering(head + PING_DOWN) as port:
        ok, words = restd.ping_verdict((await restd.get("127.0.0.1", port, "/p", {}, TIMEOUT_SECONDS)).body)
    assert not ok
    assert words == (
        "no controller responds: ctld-a (primary) down, ctld-b (backup) down: Protocol authentication error"
    )


@pytest.mark.parametrize(
    ("reply", "endless", "said"),
    [
        (b"HTTP/1.1 200 OK\r\nX-A: ", b"a" * 65536, "LimitOverrunError"),  # headers without end
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", b"", "not an HTTP reply"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nshort", b"", "IncompleteReadError"),
    ],
)
async def test_a_hostile_or_broken_peer_is_a_bounded_error(reply: bytes, endless: bytes, said: str) -> None:
    async with answering(reply, endless=endless) as port:
        with pytest.raises(restd.HttpError, match=said):
            await restd.get("127.0.0.1", port, "/readyz", {}, TIMEOUT_SECONDS)


async def test_an_endless_body_is_cut_at_the_cap() -> None:
    async with answering(b"HTTP/1.1 200 OK\r\n\r\n", endless=b"x" * 65536) as port:
        reply = await restd.get("127.0.0.1", port, "/p", {}, TIMEOUT_SECONDS)
    assert reply.status == 200 and len(reply.body) <= restd.BODY_MAX_BYTES
