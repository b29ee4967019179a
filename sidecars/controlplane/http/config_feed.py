"""config-sync's part of the web page: its `/status`, `/history` and recent plans (`/v1/plans`),
read every few seconds.

config-sync runs in the same pod as the control plane (127.0.0.1), so the page has one origin and
one credential (the viewer's: it can read plans, never start one), and config-sync keeps serving
nothing but its probes, metrics and status. What was read last is kept; a failed read is said on
the page and never blanks what was read before it. The plans are read apart: a config-sync that
cannot list them (an older one, junk) still shows its generations.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog

from sidecars.controlplane.http.plan_list import plans_of
from sidecars.runtime import answers

log = structlog.get_logger(__name__)

POLL_SECONDS = 2.0  # a person waits for a rejection to show: cheap local reads, so often
TIMEOUT_SECONDS = 5.0
MAX_ANSWER_BYTES = 16 * 1024 * 1024  # history's diffs are the most; a runaway answer is refused, not held


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
        self.plans: list[dict[str, Any]] = []
        self.plans_served: bool | None = None  # None: not read yet
        self.plans_error: str | None = None
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
            "plans": {"served": self.plans_served, "error": self.plans_error, "items": self.plans},
        }

    async def _get(self, session: aiohttp.ClientSession, path: str) -> Any:
        async with session.get(f"{self.url}{path}", headers=self._headers) as r:
            if r.status != 200:
                raise ValueError(f"{path}: HTTP {r.status}")
            # the whole answer (content.read(n) returns only what has arrived), or ValueError past the cap
            body = await answers.body(r, MAX_ANSWER_BYTES)
            try:
                return json.loads(body)
            except (UnicodeDecodeError, json.JSONDecodeError):
                raise ValueError(f"{path}: not JSON") from None

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
            error = f"config-sync at {self.url}: {str(exc) or type(exc).__name__}"
        if error is not None and error != self.error:
            log.warning("config_sync_unreadable", error=error)
        changed = error != self.error or (error is None and (status, history) != (self.status, self.history))
        self.error = error
        if error is None:
            self.status, self.history, self.history_limit = status, history, limit
            self.read_at = time.time()
            changed = await self._read_plans(session) or changed  # unreachable: not asked again
        if changed:
            self.version += 1
            self.on_change()

    async def _read_plans(self, session: aiohttp.ClientSession) -> bool:
        """Read the recent plans; whether what the page shows of them changed."""
        before = (self.plans_served, self.plans_error, self.plans)
        try:
            self.plans_served, self.plans = plans_of(await self._get(session, "/v1/plans"))
            self.plans_error = None
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:  # NotPlans is a ValueError
            error = f"config-sync at {self.url}: {str(exc) or type(exc).__name__}"
            if error != self.plans_error:
                log.warning("config_sync_plans_unreadable", error=error)
            self.plans_error = error
        return (self.plans_served, self.plans_error, self.plans) != before

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
