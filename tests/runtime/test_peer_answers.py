"""A peer's answer is input too (issue 33): the worker agent, the drain hook, the exec probe and the
control plane's config feed read it up to a cap (runtime.answers), never whole however long it
runs, and read it whole below the cap however it arrives (`StreamReader.read(n)` returned only the
first chunk of a longer answer)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from sidecars.controlplane.http.config_feed import ConfigFeed
from sidecars.runtime import limits
from sidecars.worker.cp_client import NODE_FIELDS, AgentClient, ControlPlaneUnavailable

CHUNK = 16 * 1024
SLOW_LOOPBACK_SECONDS = 300.0


@contextlib.asynccontextmanager
async def answering(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def in_chunks(request: web.Request, body: bytes, chunk: int = CHUNK) -> web.StreamResponse:
    """The body written a chunk at a time (chunked transfer: each chunk arrives on its own)."""
    r = web.StreamResponse(headers={"Content-Type": "application/json"})
    await r.prepare(request)
    for at in range(0, len(body), chunk):
        await r.write(body[at : at + chunk])
    await r.write_eof()
    return r


def node_document(reason: str) -> bytes:
    doc = {k: None for k in NODE_FIELDS} | {"name": "n1", "state": "IDLE", "version": 1, "reason": reason}
    doc |= {"flags": [], "jobs": []}
    return json.dumps(doc).encode()


async def test_the_agent_refuses_a_node_answer_past_the_cap() -> None:
    big = node_document("x" * limits.PEER_ANSWER_BYTES)  # the node's own shape, a reason past the cap

    async def handler(request: web.Request) -> web.StreamResponse:
        return await in_chunks(request, big, 256 * 1024)

    async with answering(handler) as url, aiohttp.ClientSession() as session:
        # its time-out far past what 16 MiB over loopback takes on a loaded machine: the cap ends it
        agent = AgentClient(session, url, lambda: "t", "n1", timeout=SLOW_LOOPBACK_SECONDS)
        with pytest.raises(ControlPlaneUnavailable, match=f"larger than {limits.PEER_ANSWER_BYTES} bytes"):
            await agent.node(None, 0)


async def test_the_config_feed_reads_an_answer_that_arrives_in_chunks() -> None:
    history = {"generations": [{"generation": i, "diff": "+" * 1000} for i in range(200)]}
    body = json.dumps(history).encode()  # ~200 KB, 13 chunks

    async def handler(request: web.Request) -> web.StreamResponse:
        return await in_chunks(request, body)

    async with answering(handler) as url, aiohttp.ClientSession() as session:
        feed = ConfigFeed(url)
        assert await feed._get(session, "/history") == history
