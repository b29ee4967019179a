"""Concurrent clients against slurmrestd, counting every request that did not get a whole 200 reply:
what an apply must not drop. Each client sends `GET PATH` back to back over a fresh connection
(`Connection: close`), so a request is in flight at almost every instant of the apply."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from sidecars.runtime.waits import within
from sidecars.slurm import restd as restd_edge
from tests.helpers import eventually

REQUEST_TIMEOUT_SECONDS = 60.0  # one request on a loaded machine; a hung request counts as dropped


@dataclass(slots=True)
class Tally:
    ok: int = 0
    refused: int = 0  # the port took no connection (nothing listened)
    dropped: int = 0  # connected, then reset, cut short or not a 200
    words: list[str] = field(default_factory=list)  # the first few failures, for the assert message

    def failed(self) -> int:
        return self.refused + self.dropped


async def _one(port: int, path: str, headers: dict[str, str], tally: Tally) -> None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as err:
        tally.refused += 1
        if len(tally.words) < 5:
            tally.words.append(f"refused: {err}")
        return
    try:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}Connection: close\r\n\r\n".encode())
        await writer.drain()
        reply = await within(reader.read(), REQUEST_TIMEOUT_SECONDS)
        status, _, rest = reply.partition(b"\r\n")
        head_end = rest.find(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in rest[:head_end].split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            -1,
        )
        body = rest[head_end + 4 :] if head_end >= 0 else b""
        if status.split(b" ")[1:2] == [b"200"] and length >= 0 and len(body) >= length:
            tally.ok += 1
            return
        tally.dropped += 1
        if len(tally.words) < 5:
            tally.words.append(f"bad reply: {reply[:120]!r}")
    except (OSError, TimeoutError, IndexError, ValueError) as err:
        tally.dropped += 1
        if len(tally.words) < 5:
            tally.words.append(f"{type(err).__name__}: {err}")
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


@contextlib.asynccontextmanager
async def clients(
    port: int,
    token: str,
    *,
    count: int = 8,
    path: str = "/slurm/v0.0.42/diag",
    routed: Callable[[], bool] = lambda: True,
    poll_seconds: float = 0.01,
) -> AsyncIterator[Tally]:
    """`async with clients(port, token) as tally:` `count` clients busy for the block. `routed` plays
    the Service: a new connection is opened only while it says the pod is an endpoint, and the check
    and the connect happen in one step of the loop (a numeric address is not resolved), as a
    kube-proxy rule admits a connection or not."""
    tally = Tally()
    headers = restd_edge.auth_headers(token)
    stop = asyncio.Event()

    async def client() -> None:
        while not stop.is_set():
            if routed():
                await _one(port, path, headers, tally)
            else:
                await asyncio.sleep(poll_seconds)  # another endpoint would take it

    tasks = [asyncio.create_task(client(), name=f"restd-client-{i}") for i in range(count)]
    try:
        yield tally
    finally:
        stop.set()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t


async def slow_request(port: int, token: str, then: Callable[[], bool], then_seconds: float) -> bytes:
    """Half a request, the rest once `then()` holds (polled up to `then_seconds`); the reply's status
    line, or "cut: ..." when the connection was cut or the reply never came."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /slurm/v0.0.42/diag HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        await writer.drain()
        await eventually(then, within=then_seconds, what="draining")
        head = "".join(f"{k}: {v}\r\n" for k, v in restd_edge.auth_headers(token).items())
        writer.write(f"{head}Connection: close\r\n\r\n".encode())
        await writer.drain()
        return (await within(reader.read(), REQUEST_TIMEOUT_SECONDS)).split(b"\r\n", 1)[0]
    except (OSError, TimeoutError) as err:
        return f"cut: {err!r}".encode()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
