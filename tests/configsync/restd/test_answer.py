"""Whether slurmrestd answers (restd/answer.py): whatever listens on its port, the check ends in a
yes or a no, never an exception that would end config-sync's wait."""

from __future__ import annotations

import asyncio

from sidecars.configsync.restd import answer


async def serving(reply: bytes) -> tuple[asyncio.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(reply)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, answer.HOST, 0)
    return server, server.sockets[0].getsockname()[1]


async def test_a_status_line_is_an_answer_and_a_megabyte_line_is_none() -> None:
    for reply, answered in (
        (b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n", True),
        (b"A" * (1 << 20), False),  # one line past the reader's limit: no status line
        (b"SSH-2.0-OpenSSH\r\n", False),
    ):
        server, port = await serving(reply)
        async with server:
            assert await answer.answers(port, 30.0) is answered, reply[:40]
