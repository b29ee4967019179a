"""The agent's unix-socket API, which the preStop drain hook calls.

`POST /v1/drain {"reason": str|null, "timeout_seconds": number|null}` starts (or joins) the drain and
answers when it is over: `{"result": "drained"|"no_record"|"timed_out", "detail", "seconds"}`.
A hook that disconnects (or an agent that restarts) loses nothing: the drain goes on, and asking
again joins it. `GET /v1/drain` shows the drain in progress.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

from aiohttp import web

from sidecars.runtime.http import ServerLimits, body_deadline
from sidecars.worker.drain import Drainer

DRAINER: web.AppKey[Drainer] = web.AppKey("drainer", Drainer)
WAKE: web.AppKey[asyncio.Event] = web.AppKey("wake", asyncio.Event)
REFUSED: web.AppKey[Callable[[], str | None]] = web.AppKey("refused")


def _bad(message: str) -> web.Response:
    return web.json_response({"error": message}, status=400)


async def post_drain(request: web.Request) -> web.Response:
    try:
        body: Any = await request.json() if request.body_exists else {}
    except ValueError:
        return _bad("body is not JSON")
    if not isinstance(body, dict):
        return _bad("body must be a JSON object")
    reason = body.get("reason")
    timeout = body.get("timeout_seconds")
    if reason is not None and (not isinstance(reason, str) or len(reason) > 200 or "\n" in reason):
        return _bad("reason: a single line of at most 200 characters")
    if timeout is not None and (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or not math.isfinite(timeout)
        or timeout < 0
    ):
        return _bad("timeout_seconds: a number >= 0")
    refused = request.app[REFUSED]()
    if refused is not None:  # the Slurm node is another pod's: draining it would stop that pod's jobs
        return web.json_response(
            {"result": "no_record", "detail": f"nothing drained: {refused}", "seconds": 0}
        )
    drainer = request.app[DRAINER]
    fut = drainer.request(reason, float(timeout) if timeout is not None else None)
    request.app[WAKE].set()
    try:
        answer = await asyncio.shield(fut)
    finally:
        drainer.forget(fut)  # a hook that went away: the drain goes on without it
    return web.json_response(answer)


async def get_drain(request: web.Request) -> web.Response:
    return web.json_response({"drain": request.app[DRAINER].as_json()})


def app(
    drainer: Drainer,
    wake: asyncio.Event,
    refused: Callable[[], str | None] = lambda: None,
    limits: ServerLimits | None = None,
) -> web.Application:
    """`refused()`: why this pod must not drain the node (it does not hold it), or None."""
    size = 16 * 1024
    body_seconds = (limits or ServerLimits()).body_seconds
    application = web.Application(client_max_size=size, middlewares=[body_deadline(body_seconds, size)])
    application[DRAINER] = drainer
    application[WAKE] = wake
    application[REFUSED] = refused
    application.router.add_post("/v1/drain", post_drain)
    application.router.add_get("/v1/drain", get_drain)
    return application
