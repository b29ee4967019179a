"""The agent's unix-socket API, which the preStop drain hook calls.

`POST /v1/drain {"reason": str|null, "timeout_seconds": number|null}` starts (or joins) the drain and
answers when it is over: `{"result": "drained"|"no_record"|"timed_out", "detail", "seconds"}`.
A hook that disconnects (or an agent that restarts) loses nothing: the drain goes on, and asking
again joins it. `GET /v1/drain` shows the drain in progress.

Every refusal is JSON, `{"error": str, "retry": bool}`: `retry` false means asking again cannot
help (a bad request, a route this agent does not have, a fault in the agent), and the hook gives up
at once instead of for the whole grace period.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from sidecars.protocol import drains
from sidecars.protocol.events import EventReason
from sidecars.runtime.http import application
from sidecars.worker.drain import Drainer

log = structlog.get_logger(__name__)

DRAINER: web.AppKey[Drainer] = web.AppKey("drainer", Drainer)
WAKE: web.AppKey[asyncio.Event] = web.AppKey("wake", asyncio.Event)
REFUSED: web.AppKey[Callable[[], str | None]] = web.AppKey("refused")


def _error(status: int, message: str, retry: bool) -> web.Response:
    return web.json_response({"error": message, "retry": retry}, status=status)


def _bad(message: str) -> web.Response:
    return _error(400, message, retry=False)


@web.middleware
async def json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """The router's 404 and 405 and any fault, as JSON the hook can read (never an HTML page)."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        # 503 and 429 say "later"; any other refusal will be the same next time
        return _error(exc.status, exc.reason, retry=exc.status in {429, 503})
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("drain_api_failed", path=request.path)
        return _error(500, f"agent fault: {type(exc).__name__}: {exc}", retry=False)


async def post_drain(request: web.Request) -> web.Response:
    try:
        body: Any = await request.json() if request.body_exists else {}
    except ValueError:
        return _bad("body is not JSON")
    if not isinstance(body, dict):
        return _bad("body must be a JSON object")
    reason = body.get("reason")
    timeout = body.get("timeout_seconds")
    if reason is not None and (problem := drains.reason_problem(reason)) is not None:
        return _bad(f"reason: {problem}")
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
            {"result": drains.NO_RECORD, "detail": f"nothing drained: {refused}", "seconds": 0}
        )
    drainer = request.app[DRAINER]
    fut = drainer.request(reason, float(timeout) if timeout is not None else None)
    request.app[WAKE].set()
    if drainer.unsaved is not None:
        await drainer.events.emit(EventReason.DRAIN_NOT_RECORDED, drainer.unsaved, "Warning")
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
) -> web.Application:
    """`refused()`: why this pod must not drain the node (it does not hold it), or None."""
    # json_errors outermost: the body reader's refusals (408, 413, 503) pass it as JSON already
    app_ = application(16 * 1024, [json_errors])
    app_[DRAINER] = drainer
    app_[WAKE] = wake
    app_[REFUSED] = refused
    app_.router.add_post("/v1/drain", post_drain)
    app_.router.add_get("/v1/drain", get_drain)
    return app_
