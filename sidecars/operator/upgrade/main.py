"""`slurm-sidecars upgrade start|status|pause|resume`: a paced roll of the workers, through the
control plane's `/v1/upgrade`. Exit 0 when done, 2 when refused (one line on stderr, nothing
changed), 1 when the control plane cannot be reached or fails."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from sidecars.operator.client import ControlPlaneClient, Request, control_plane_flags, run
from sidecars.runtime.settings import ConfigError, flag

ACTIONS = ("start", "status", "pause", "resume")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=ACTIONS, help="what to do")
    control_plane_flags(p)
    flag(p, "--revision", help="start: the new pods' revision label (StatefulSet updateRevision)")
    flag(p, "--deployment", help="start: a Deployment's name, paused now; change its template after")
    flag(p, "--upgrade-budget", help="start: workers out of service at once, a number or a percentage")
    flag(p, "--slurm-version", help="start: the new image's slurmd release, checked against slurmctld")


@dataclass(frozen=True)
class UpgradeSettings:
    action: str
    control_plane: ControlPlaneClient
    body: dict[str, str]

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> UpgradeSettings:
        control_plane = ControlPlaneClient.from_args(args)
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
        return cls(args.action, control_plane, body)

    def request(self) -> Request:
        if self.action == "status":
            return Request(method="GET", path="/v1/upgrade")
        if self.action == "start":
            return Request(method="POST", path="/v1/upgrade", body=self.body)
        return Request(method="POST", path=f"/v1/upgrade/{self.action}")


def render_versions(versions: dict[str, Any] | None) -> list[str]:
    """slurmctld's release, then each slurmd's: the agent's report where given, else the record."""
    if not versions:
        return []
    lines = [f"slurmctld {versions.get('controller') or 'unknown'}"]
    for node, v in versions.get("nodes", {}).items():
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
    if not up and report.get("unavailable"):
        return [f"upgrades unavailable: {report['unavailable']}", *render_versions(report.get("versions"))]
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


def main(args: argparse.Namespace) -> int:
    settings = UpgradeSettings.from_args(args)

    def show(body: Any) -> None:
        if settings.action == "status":
            print("\n".join(render(body)))
        elif settings.action == "start":
            print(f"upgrade to {body['started']} started, budget {body['budget']}")
        else:
            print(f"upgrade to {body['revision']} {'paused' if body['paused'] else 'resumed'}")

    return run("upgrade", settings.control_plane, settings.request(), show)
