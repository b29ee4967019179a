"""Whether slurmrestd answers HTTP on its port: a restart counts only then. A new listening socket
alone does not tell (slurmrestd binds its port, drops to its user, and only then checks it may run as
that user: 24.11 ends there with the port briefly open).

Any status line is an answer (without a token slurmrestd says 401, which is slurmrestd answering).
The reply is read to its end (`Connection: close`: slurmrestd closes first), so this check leaves no
connection open on slurmrestd's side for a later drain to wait on."""

from __future__ import annotations

import asyncio
import contextlib

HOST = "127.0.0.1"  # slurmrestd shares the pod's network namespace with config-sync
MAX_REPLY = 256 * 1024  # read to the end, at most this much (26.05 doubles some replies)
REQUEST = b"GET /livez HTTP/1.1\r\nHost: slurmrestd\r\nConnection: close\r\n\r\n"


async def answers(port: int, seconds: float) -> bool:
    """An HTTP status line from the port within `seconds` (the rest of the reply read within them too:
    a reply cut short after its status line is still slurmrestd answering)."""
    status = b""
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(seconds):
            reader, writer = await asyncio.open_connection(HOST, port)
            writer.write(REQUEST)
            await writer.drain()
            status = await reader.readline()
            left = MAX_REPLY
            while left > 0 and (chunk := await reader.read(min(left, 65536))):
                left -= len(chunk)
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
        pass  # ValueError: a status line past the reader's 64 KiB limit is no answer either
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    return status.startswith(b"HTTP/1.")
