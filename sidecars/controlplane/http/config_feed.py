"""config-sync's part of the web page: its `/status` and `/history`, read every few seconds.

config-sync runs in the same pod as the control plane (127.0.0.1), so the page has one origin and
one credential, and config-sync keeps serving nothing but its probes, metrics and status. What was
read last is kept; a failed read is said on the page and never blanks what was read before it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog

log = structlog.get_logger(__name__)

POLL_SECONDS = 2.0  # a person waits for a rejection to show: cheap local reads, so often
TIMEOUT_SECONDS = 5.0


class ConfigFeed:
    def __init__(
        self,
        url: str | None,
        *,
        token: str | None = None,
        on_change: Callable[[], None] = lambda: None,
        interval: float = POLL_SECONDS,
    ) -> None:
        self.url = url
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}  # config-sync's viewer
        self.interval = interval
        self.on_change = on_change
        self.status: dict[str, Any] | None = None
        self.history: list[dict[str, Any]] = []
        self.history_limit: int | None = None
        self.error: str | None = None if url else "no --config-sync URL given"
        self.read_at: float | None = None
        self.version = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "source": self.url,
            "reachable": self.error is None,
            "error": self.error,
            "read_at": self.read_at,
            "status": self.status,
            "history": self.history,
            "history_limit": self.history_limit,
        }

    async def _get(self, session: aiohttp.ClientSession, path: str) -> Any:
        async with session.get(f"{self.url}{path}", headers=self._headers) as r:
            if r.status != 200:
                raise ValueError(f"{path}: HTTP {r.status}")
            return await r.json(content_type=None)

    async def read_once(self, session: aiohttp.ClientSession) -> None:
        error: str | None = None
        status, history, limit = self.status, self.history, self.history_limit
        try:
            status = await self._get(session, "/status")
            body = await self._get(session, "/history")
            if not isinstance(status, dict) or not isinstance(body, dict):
                raise ValueError("unexpected answer (not a JSON object)")
            gens, limit = body.get("generations"), body.get("limit")
            if not isinstance(gens, list):
                raise ValueError("/history: no 'generations' list")
            history = gens
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            error = f"config-sync at {self.url}: {exc or type(exc).__name__}"
        if error is not None and error != self.error:
            log.warning("config_sync_unreadable", error=error)
        changed = error != self.error or (error is None and (status, history) != (self.status, self.history))
        self.error = error
        if error is None:
            self.status, self.history, self.history_limit = status, history, limit
            self.read_at = time.time()
        if changed:
            self.version += 1
            self.on_change()

    async def run(self) -> None:
        if self.url is None:
            return
        timeout = aiohttp.ClientTimeout(total=TIMEOUT_SECONDS)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                try:
                    await self.read_once(session)
                except Exception as exc:  # one odd answer must not end the feed
                    log.warning("config_feed_failed", error=str(exc))
                await asyncio.sleep(self.interval)
