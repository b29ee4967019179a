"""One GET of a JSON document from a sidecar, every failure turned into a one-line SourceError; the
control plane's client as the flags name it."""

from __future__ import annotations

from typing import Any

import aiohttp

from sidecars.operator.client import ControlPlaneClient
from sidecars.operator.status.report import SourceError
from sidecars.operator.status.settings import StatusSettings
from sidecars.runtime import answers


def control_plane_client(settings: StatusSettings) -> ControlPlaneClient:
    """`--control-plane`'s client, bearing `--token-file`'s token (both given: the caller checks)."""
    assert settings.control_plane is not None and settings.token is not None
    return ControlPlaneClient(
        url=settings.control_plane,
        token=settings.token,
        timeout_seconds=settings.timeout_seconds,
        tls=settings.tls,
    )


async def get_json(session: aiohttp.ClientSession, url: str, what: str) -> Any:
    """The session bears whatever the source needs (the control plane's: a ControlPlaneClient's)."""
    try:
        async with session.get(url) as r:
            if r.status in (401, 403):
                raise SourceError(f"{what}: {url}: HTTP {r.status}: the token was refused")
            if r.status != 200:
                raise SourceError(f"{what}: {url}: HTTP {r.status}: {(await answers.text(r)).strip()[:200]}")
            try:
                return await answers.json_of(r)
            except answers.AnswerTooLarge as exc:
                raise SourceError(f"{what}: {url}: {exc}") from None
            except ValueError:
                raise SourceError(f"{what}: {url}: the answer is not JSON") from None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise SourceError(f"{what}: {url}: unreachable: {exc or type(exc).__name__}") from None
