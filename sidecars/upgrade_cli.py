"""`slurm-sidecars upgrade start|status|pause|resume`: a paced roll of the workers, through the
control plane's `/v1/upgrade`. Exit 0 when done, 2 when refused (one line on stderr, nothing
changed), 1 when the control plane cannot be reached or fails."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from typing import Any

import aiohttp

from sidecars.runtime.daemon import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK
from sidecars.runtime.settings import ConfigError, flag, positive, read_token

ACTIONS = ("start", "status", "pause", "resume")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=ACTIONS, help="what to do")
    flag(p, "--control-plane", help="control-plane URL, e.g. http://slurm-sidecars-control-plane:9200")
    flag(p, "--token-file", help="bearer token for the control plane (a mounted Secret)")
    flag(p, "--revision", help="start: the new pods' revision label (StatefulSet updateRevision)")
    flag(p, "--deployment", help="start: a Deployment's name, paused now; change its template after")
    flag(p, "--upgrade-budget", help="start: workers out of service at once, a number or a percentage")
    flag(p, "--slurm-version", help="start: the new image's slurmd release, checked against slurmctld")
    flag(p, "--timeout-seconds", default="30", help="give up on the control plane after this long")


@dataclass(frozen=True)
class UpgradeSettings:
    action: str
    url: str
    token: str
    body: dict[str, str]
    timeout: float

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> UpgradeSettings:
        url = args.control_plane
        if not url or not str(url).startswith(("http://", "https://")):
            raise ConfigError(f"--control-plane must be an http(s) URL, got {url!r}")
        token = read_token(args.token_file)
        body: dict[str, str] = {}
        if args.action == "start":
            if not (args.revision or args.deployment) or not args.upgrade_budget:
                raise ConfigError("start needs --revision (or --deployment) and --upgrade-budget")
            if args.revision and args.deployment:
                raise ConfigError("start takes --revision (a StatefulSet's) or --deployment, not both")
            body = {"budget": args.upgrade_budget}
            body.update({"deployment": args.deployment} if args.deployment else {"revision": args.revision})
            if args.slurm_version:
                body["slurm_version"] = args.slurm_version
        return cls(
            args.action,
            str(url).rstrip("/"),
            token,
            body,
            positive(args.timeout_seconds, "--timeout-seconds"),
        )


def render_versions(versions: dict[str, Any] | None) -> list[str]:
    """slurmctld's release, then each slurmd's: the agent's report where given, else the record."""
    if not versions:
        return []
    lines = [f"slurmctld {versions.get('slurmctld') or 'unknown'}"]
    for node, v in versions.get("slurmd", {}).items():
        if v.get("agent"):
            seen = f"{v['agent']} (agent: slurmd -V)"
            if v.get("record") and v["record"] != v["agent"]:
                seen += f"; node record {v['record']}"
        else:
            seen = f"{v.get('record')} (node record)"
        lines.append(f"  slurmd {node:<16} {seen}")
    return lines


def render(report: dict[str, Any]) -> list[str]:
    up = report.get("upgrade")
    if not up:
        return ["no upgrade started", *render_versions(report.get("versions"))]
    state = "complete" if up["complete"] else ("paused" if up["paused"] else "rolling")
    if up.get("waiting_for"):
        state += f", waiting for {up['waiting_for']}"
    lines = [
        f"upgrade to {up['revision']}: {state}, {up['upgraded']}/{up['workers']} upgraded, "
        f"{up['out_of_service']} out of service (budget {up['budget']} = {up['budget_workers']})"
    ]
    lines += [f"  {node:<16} {what}" for node, what in up["nodes"].items()]
    return lines + render_versions(report.get("versions"))


async def call(settings: UpgradeSettings) -> tuple[int, Any]:
    base = f"{settings.url}/v1/upgrade"
    async with aiohttp.ClientSession(
        headers={"Authorization": f"Bearer {settings.token}"},
        timeout=aiohttp.ClientTimeout(total=settings.timeout),
    ) as s:
        if settings.action == "status":
            req = s.get(base)
        elif settings.action == "start":
            req = s.post(base, json=settings.body)
        else:
            req = s.post(f"{base}/{settings.action}")
        async with req as r:
            return r.status, await r.json(content_type=None)


def main(args: argparse.Namespace) -> int:
    settings = UpgradeSettings.from_args(args)
    try:
        status, body = asyncio.run(call(settings))
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        print(
            f"slurm-sidecars upgrade: control plane unreachable: {exc or type(exc).__name__}", file=sys.stderr
        )
        return EXIT_FAILURE
    if status >= 400:
        error = body.get("error", body) if isinstance(body, dict) else body
        print(f"slurm-sidecars upgrade: {error}", file=sys.stderr)
        return EXIT_CONFIG if status < 500 else EXIT_FAILURE
    if settings.action == "status":
        print("\n".join(render(body)))
    elif settings.action == "start":
        print(f"upgrade to {body['started']} started, budget {body['budget']}")
    else:
        print(f"upgrade to {body['revision']} {'paused' if body['paused'] else 'resumed'}")
    return EXIT_OK
