"""How every handler under /v1/ and /ui/ refuses: `{"error": "..."}` with its status, and the
follower's answer to a write (503 naming the Lease holder)."""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web


class Leadership(Protocol):
    @property
    def is_leader(self) -> bool: ...  # read at each write: it lapses with the Lease

    holder: str | None


def error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


def not_leader(leader: Leadership) -> web.Response | None:
    """A write on a follower: 503 naming the Lease holder, to retry there (None on the leader)."""
    if leader.is_leader:
        return None
    resp = error(503, "not the leader: writes go to the Lease holder", leader=leader.holder)
    resp.headers["Retry-After"] = "1"
    return resp
