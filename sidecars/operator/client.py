"""The control plane's API as the operator's commands call it (`maintenance`, `upgrade`, `status`).

Where it is, the bearer token and a time limit come from the same flags in every command; one
request's answer becomes the command's exit code: 0 done, 2 refused (a 4xx: the reason on one line
of stderr, nothing changed), 1 when the control plane cannot be reached or fails (a 5xx).
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from sidecars.runtime.daemon import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK
from sidecars.runtime.http import CA_FILE
from sidecars.runtime.settings import TOKEN_FILE, URL, add_flags, declared, seconds, setting, settings_from


@declared(kw_only=True)
class ControlPlaneClient:
    """How an operator's command reaches the control plane: its flags, and a session from them."""

    url: str = setting(  # the base URL, no trailing slash
        flag="--control-plane",
        conv=URL,
        required=True,
        help="control-plane URL, e.g. http://slurm-sidecars-control-plane:9200",
    )
    token: str = setting(
        flag="--token-file",
        conv=TOKEN_FILE,
        required=True,
        help="bearer token for the control plane (a mounted Secret)",
    )
    timeout_seconds: float = setting(  # for a whole request
        default=30.0, conv=seconds(), help="give up on the control plane after this long"
    )
    tls: ssl.SSLContext | None = setting(  # None: the system's CAs
        default=None,
        flag="--ca-file",
        conv=CA_FILE,
        help="CA certificate(s) to trust for an https control plane",
    )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ControlPlaneClient:
        """From `--control-plane`, `--token-file` and `--timeout-seconds`; ConfigError when one is bad."""
        return settings_from(cls, args)

    def session(self) -> aiohttp.ClientSession:
        """A session whose every request bears the token and ends within the timeout."""
        return aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=aiohttp.ClientTimeout(total=self.timeout_seconds),
            connector=aiohttp.TCPConnector(ssl=self.tls or True),
        )


def control_plane_flags(p: argparse.ArgumentParser) -> None:
    """The flags `ControlPlaneClient.from_args` reads."""
    add_flags(p, ControlPlaneClient)


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    method: str  # GET, POST, DELETE
    path: str  # after the base URL, e.g. /v1/upgrade/pause
    body: dict[str, str] | None = None  # sent as JSON; None sends no body


async def send(cp: ControlPlaneClient, request: Request) -> tuple[int, Any]:
    """The HTTP status and the answer's JSON (None for an empty answer; ValueError when not JSON)."""
    async with (
        cp.session() as session,
        session.request(request.method, cp.url + request.path, json=request.body) as r,
    ):
        return r.status, await r.json(content_type=None)


async def answer(command: str, cp: ControlPlaneClient, request: Request, show: Callable[[Any], None]) -> int:
    """Send `request`; `show` prints an answer that is not an error. The exit code, as above."""
    try:
        status, body = await send(cp, request)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        print(
            f"slurm-sidecars {command}: control plane unreachable: {exc or type(exc).__name__}",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    if status >= 400:
        error = body.get("error", body) if isinstance(body, dict) else body
        print(f"slurm-sidecars {command}: {error}", file=sys.stderr)
        return EXIT_CONFIG if status < 500 else EXIT_FAILURE
    show(body)
    return EXIT_OK


def run(command: str, cp: ControlPlaneClient, request: Request, show: Callable[[Any], None]) -> int:
    """`answer` from a command's `main`, which runs no event loop of its own."""
    return asyncio.run(answer(command, cp, request, show))
