"""The config generation and the last rejection, from config-sync's `/status`."""

from __future__ import annotations

from typing import Any

import aiohttp

from sidecars.operator.status.fetch import get_json
from sidecars.operator.status.report import SourceError
from sidecars.operator.status.settings import StatusSettings


async def read_config_sync(settings: StatusSettings) -> dict[str, Any]:
    assert settings.config_sync is not None
    url = f"{settings.config_sync}/status"
    headers = {"Authorization": f"Bearer {settings.token}"} if settings.token else {}  # the viewer's
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=settings.timeout_seconds),
        headers=headers,
        connector=aiohttp.TCPConnector(ssl=settings.tls or True),
    ) as session:
        body = await get_json(session, url, "config-sync")
    if not isinstance(body, dict) or "applied" not in body:
        raise SourceError(f"config-sync: {url}: unexpected answer (no 'applied')")
    return body
