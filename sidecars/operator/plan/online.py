"""A plan asked of config-sync (`POST /v1/plan`): the live set, the live state, the live release.

The whole candidate goes in one request, each file in base64 and marked secret when it came from
a Secret (its contents are then never shown). config-sync answers the plan, or why it would not
make one now: 401 (the operator's credential), 429 (a plan is running), 400 (a bad set).
"""

from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp

from sidecars.configsync.fileset.sources import FileSet

EXIT_NO_PLAN = 5  # config-sync unreachable, busy (429), or refusing the request: no verdict


class NoPlan(Exception):
    """config-sync gave no plan; the message says why, for one line of stderr."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigSyncPlanner:
    url: str  # config-sync's base URL, no trailing slash
    token: str  # the operator's
    timeout_seconds: float
    tls: ssl.SSLContext | None = None  # None: the system's CAs


def body(files: FileSet, secret_sources: frozenset[Any]) -> dict[str, Any]:
    return {
        "files": [
            {
                "name": e.name,
                "data": base64.b64encode(e.data).decode(),
                "secret": e.secret or e.source in secret_sources,
            }
            for e in files.files.values()
        ]
    }


async def plan_online(
    where: ConfigSyncPlanner, files: FileSet, secret_sources: frozenset[Any]
) -> dict[str, Any]:
    """config-sync's answer (Plan.as_json()); NoPlan when there is none."""
    try:
        async with (
            aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {where.token}"},
                timeout=aiohttp.ClientTimeout(total=where.timeout_seconds),
                connector=aiohttp.TCPConnector(ssl=where.tls or True),
            ) as session,
            session.post(f"{where.url}/v1/plan", json=body(files, secret_sources)) as r,
        ):
            answer = await r.json(content_type=None)
            status, retry = r.status, r.headers.get("Retry-After")
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise NoPlan(f"config-sync unreachable: {exc or type(exc).__name__}") from None
    if status == 429:
        raise NoPlan(f"config-sync is running another plan; try again in {retry or 'a few'} s")
    if status != 200 or not isinstance(answer, dict) or "verdict" not in answer:
        error = answer.get("error", answer) if isinstance(answer, dict) else answer
        raise NoPlan(f"config-sync answered {status}: {error}")
    return answer
