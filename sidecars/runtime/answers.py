"""A peer's HTTP answer read up to a cap (issue 33: a peer's answer is input like any text). aiohttp
reads a client response's whole body however long it runs (`text()`, `json()`); an impostor or a
runaway peer answering without end would fill memory, and hold the caller until its time-out,
before any check looked at a byte. `StreamReader.read(n)` is no cap either: it returns what has
arrived, a first chunk of a longer answer."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from sidecars.runtime import limits

CHUNK_BYTES = 64 * 1024


class AnswerTooLarge(ValueError):
    """Past the cap: not read further (a ValueError, as a malformed answer is)."""


async def body(r: aiohttp.ClientResponse, cap: int = limits.PEER_ANSWER_BYTES) -> bytes:
    """The whole body, or AnswerTooLarge once more than `cap` bytes arrived."""
    raw = bytearray()
    async for chunk in r.content.iter_chunked(CHUNK_BYTES):
        raw += chunk
        if len(raw) > cap:
            raise AnswerTooLarge(f"{r.method} {r.url.path}: answer larger than {cap} bytes, not read further")
    return bytes(raw)


async def text(r: aiohttp.ClientResponse, cap: int = limits.PEER_ANSWER_BYTES) -> str:
    """The body as text (its charset, else UTF-8; undecodable bytes replaced), capped as `body`."""
    raw = await body(r, cap)
    try:
        return raw.decode(r.charset or "utf-8", "replace")
    except LookupError:  # a charset Python does not know
        return raw.decode("utf-8", "replace")


async def json_of(r: aiohttp.ClientResponse, cap: int = limits.PEER_ANSWER_BYTES) -> Any:
    """The body as JSON, capped as `body`; ValueError when it is none."""
    return json.loads(await body(r, cap))
