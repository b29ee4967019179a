"""`slurm-sidecars upgrade start|status|pause|resume`: a paced roll of the workers, or with `--image`
per role a whole-cluster upgrade (slurmdbd, slurmctld, then the workers), through the control plane's
`/v1/upgrade`. Exit 0 when done, 2 when refused (one line on stderr, nothing
changed), 1 when the control plane cannot be reached or fails."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sidecars.operator.client import ControlPlaneClient, Request, control_plane_flags, run
from sidecars.runtime.settings import ConfigError, Conv, add_flags, declared, setting, settings_from
from sidecars.slurm import daemons

ACTIONS = ("start", "status", "pause", "resume")
ROLES = daemons.UPGRADE_ORDER


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=ACTIONS, help="what to do")
    control_plane_flags(p)
    add_flags(p, StartFlags)


@declared(kw_only=True)
class StartFlags:
    """An upgrade to start, as given (`UpgradeSettings.from_args` says which go together)."""

    revision: str | None = setting(
        default=None, help="start: the new pods' revision label (StatefulSet updateRevision)"
    )
    deployment: str | None = setting(
        default=None, help="start: a Deployment's name, paused now; change its template after"
    )
    upgrade_budget: str | None = setting(
        default=None, help="start: workers out of service at once, a number or a percentage"
    )
    slurm_version: str | None = setting(
        default=None,
        help="start: the new image's slurmd release, checked against slurmctld; with --image, the release "
        "the whole cluster moves to",
    )
    images: tuple[str, ...] = setting(
        default=(),
        flag="--image",
        conv=Conv(lambda text, what: text, metavar="ROLE=IMAGE"),  # checked whole by cluster_body
        multiple=True,
        help="start a whole-cluster upgrade: slurmdbd=, slurmctld= and slurmd= each role's new image or "
        "revision (in the dev cluster, a release's name)",
    )


@dataclass(frozen=True)
class UpgradeSettings:
    action: str
    control_plane: ControlPlaneClient
    body: dict[str, Any]
    path: str = "/v1/upgrade"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> UpgradeSettings:
        control_plane = ControlPlaneClient.from_args(args)
        start = settings_from(StartFlags, args)
        body: dict[str, Any] = {}
        if args.action == "start" and start.images:
            return cls(
                args.action,
                control_plane,
                cluster_body(start.slurm_version, start.images),
                "/v1/upgrade/cluster",
            )
        if args.action == "start":
            if not (start.revision or start.deployment) or not start.upgrade_budget:
                raise ConfigError("start needs --revision (or --deployment) and --upgrade-budget")
            if start.revision and start.deployment:
                raise ConfigError("start takes --revision (a StatefulSet's) or --deployment, not both")
            body = {"budget": start.upgrade_budget}
            body.update(
                {"deployment": start.deployment} if start.deployment else {"revision": start.revision}
            )
            if start.slurm_version:
                body["slurm_version"] = start.slurm_version
        return cls(args.action, control_plane, body)

    def request(self) -> Request:
        if self.action == "status":
            return Request(method="GET", path="/v1/upgrade")
        if self.action == "start":
            return Request(method="POST", path=self.path, body=self.body)
        return Request(method="POST", path=f"/v1/upgrade/{self.action}")


def cluster_body(version: str | None, images: Sequence[str]) -> dict[str, Any]:
    """The whole-cluster request: the release and each role's image, every role once."""
    if not version:
        raise ConfigError("a whole-cluster upgrade (--image) needs --slurm-version, the release to move to")
    given: dict[str, str] = {}
    for item in images:
        role, sep, image = item.partition("=")
        if not sep or not image or role not in ROLES:
            raise ConfigError(f"--image {item!r}: give ROLE=IMAGE, ROLE one of {', '.join(ROLES)}")
        if role in given:
            raise ConfigError(f"--image {role}= given twice")
        given[role] = image
    missing = [r for r in ROLES if r not in given]
    if missing:
        raise ConfigError(f"a whole-cluster upgrade needs --image for {', '.join(missing)} too")
    return {"slurm_version": version, "images": given}


def render_cluster(up: dict[str, Any] | None) -> list[str]:
    """The whole-cluster upgrade: its state, then each stage's state, time and words."""
    if not up:
        return []
    lines = [f"cluster upgrade to {up['target']}: {up['state']}" + (" (paused)" if up.get("paused") else "")]
    for stage in up["stages"]:
        took = f" {stage['seconds']:.1f}s" if stage.get("seconds") is not None else ""
        detail = f": {stage['detail']}" if stage.get("detail") else ""
        lines.append(f"  {stage['name']:<10} {stage['state']}{took}{detail}")
        if stage.get("died_at") is not None:
            lines.append("  " + _death(stage))
    if up.get("slurmctld_unanswered_seconds") is not None:
        lines.append(f"  slurmctld did not answer for {up['slurmctld_unanswered_seconds']:.1f}s")
    if up.get("resumed_from"):
        lines.append(f"  started again at its {up['resumed_from']} stage")
    kept = [
        f"{what} {up[key]}"
        for what, key in (("backup", "backup"), ("state copy", "state_copy"))
        if up.get(key)
    ]
    if kept:
        lines.append(f"  {'; '.join(kept)}")
    return lines


def _death(stage: dict[str, Any]) -> str:
    """The daemon a stage started and saw die: when, its last words, and how soon the stage acted."""
    died = float(stage["died_at"])
    when = time.strftime("%H:%M:%S", time.gmtime(died)) + f"{died % 1:.3f}"[1:] + "Z"
    acted = stage.get("acted_at")
    after = f"; acted on {float(acted) - died:.1f}s later" if acted is not None else ""
    words = stage.get("last_words") or "no last words"
    return f"  {stage['name']}: its new daemon died at {when}: {words}{after}"


def render_versions(versions: dict[str, Any] | None) -> list[str]:
    """slurmctld's release, then each slurmd's: the agent's report where given, else the record."""
    if not versions:
        return []
    lines = [f"slurmctld {versions.get('controller') or 'unknown'}"]
    if versions.get(daemons.SLURMDBD):
        lines.append(f"slurmdbd {versions[daemons.SLURMDBD]} (accounting)")
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
    unreadable = [f"cluster upgrade: {report['cluster_error']}"] if report.get("cluster_error") else []
    return unreadable + render_cluster(report.get("cluster")) + render_roll(report)


def render_roll(report: dict[str, Any]) -> list[str]:
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
        elif settings.action == "start" and "images" in body:
            print(f"cluster upgrade to {body['started']} started: `upgrade status` shows its stages")
        elif settings.action == "start":
            print(f"upgrade to {body['started']} started, budget {body['budget']}")
        else:
            name = body.get("revision") or body.get("target")
            print(f"upgrade to {name} {'paused' if body['paused'] else 'resumed'}")

    return run("upgrade", settings.control_plane, settings.request(), show)
