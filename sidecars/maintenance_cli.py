"""`slurm-sidecars maintenance create|list|delete`: planned windows, through the control plane's API.

Exit 0 when done, 2 when the invocation or the window is refused (the reason on one line of
stderr, nothing changed), 1 when the control plane cannot be reached or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from typing import Any

import aiohttp

from sidecars.runtime.daemon import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK
from sidecars.runtime.settings import ConfigError, flag, positive, read_token

ACTIONS = ("create", "list", "delete")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=ACTIONS, help="what to do")
    p.add_argument("name", nargs="?", help="the window (delete; optional for create)")
    flag(p, "--control-plane", help="control-plane URL, e.g. http://slurm-sidecars-control-plane:9200")
    flag(p, "--token-file", help="bearer token for the control plane (a mounted Secret)")
    flag(p, "--nodes", help="create: the Slurm nodes, a hostlist such as gpu[01-08]")
    flag(p, "--start", default="now", help="create: `now` or an RFC 3339 time with offset")
    flag(p, "--duration", help="create: how long, e.g. 90m, 4h, 1h30m, 1d")
    flag(p, "--reason", help="create: why (kept in the reservation's comment)")
    flag(p, "--timeout-seconds", default="30", help="give up on the control plane after this long")


@dataclass(frozen=True)
class MaintenanceSettings:
    action: str
    name: str | None
    url: str
    token: str
    body: dict[str, str]
    timeout: float

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MaintenanceSettings:
        url = args.control_plane
        if not url or not str(url).startswith(("http://", "https://")):
            raise ConfigError(f"--control-plane must be an http(s) URL, got {url!r}")
        token = read_token(args.token_file)
        body: dict[str, str] = {}
        if args.action == "create":
            for f in ("nodes", "duration", "reason"):
                if not getattr(args, f):
                    raise ConfigError(f"create needs --{f}")
            body = {
                "nodes": args.nodes,
                "start": args.start,
                "duration": args.duration,
                "reason": args.reason,
            }
            if args.name:
                body["name"] = args.name
        elif args.action == "delete" and not args.name:
            raise ConfigError("delete needs the window's NAME")
        elif args.action == "list" and args.name:
            raise ConfigError("list takes no NAME")
        return cls(
            args.action,
            args.name,
            str(url).rstrip("/"),
            token,
            body,
            positive(args.timeout_seconds, "--timeout-seconds"),
        )


def render(window: dict[str, Any]) -> list[str]:
    state = "active" if window["active"] else "scheduled"
    lines = [
        f"{window['name']}  {window['start']} -> {window['end']}  {state}"
        f"  ({window['source']}) {window['reason']}"
    ]
    for node, report in sorted(window["node_states"].items()):
        lines.append(f"  {node:<16} {report['detail']}")
    return lines


async def call(settings: MaintenanceSettings) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {settings.token}"}
    base = f"{settings.url}/v1/maintenance"
    async with aiohttp.ClientSession(
        headers=headers, timeout=aiohttp.ClientTimeout(total=settings.timeout)
    ) as s:
        if settings.action == "create":
            req = s.post(base, json=settings.body)
        elif settings.action == "delete":
            req = s.delete(f"{base}/{settings.name}")
        else:
            req = s.get(base)
        async with req as r:
            return r.status, await r.json(content_type=None)


def main(args: argparse.Namespace) -> int:
    settings = MaintenanceSettings.from_args(args)
    try:
        status, body = asyncio.run(call(settings))
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        print(
            f"slurm-sidecars maintenance: control plane unreachable: {exc or type(exc).__name__}",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    if status >= 400:
        error = body.get("error", body) if isinstance(body, dict) else body
        print(f"slurm-sidecars maintenance: {error}", file=sys.stderr)
        return EXIT_CONFIG if status < 500 else EXIT_FAILURE
    if settings.action == "list":
        for window in body["windows"]:
            print("\n".join(render(window)))
        if not body["windows"]:
            print("no maintenance windows")
    elif settings.action == "create":
        print("\n".join(render(body)))
    else:
        print(f"deleted {body['deleted']}: its drains are undone as the control plane's next cycle runs")
    return EXIT_OK
