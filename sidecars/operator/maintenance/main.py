"""`slurm-sidecars maintenance create|list|delete`: planned windows, through the control plane's API.

Exit 0 when done, 2 when the invocation or the window is refused (the reason on one line of
stderr, nothing changed), 1 when the control plane cannot be reached or fails.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from sidecars.operator.client import ControlPlaneClient, Request, control_plane_flags, run
from sidecars.runtime.settings import ConfigError, add_flags, declared, setting, settings_from

ACTIONS = ("create", "list", "delete")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=ACTIONS, help="what to do")
    p.add_argument("name", nargs="?", help="the window (delete; optional for create)")
    control_plane_flags(p)
    add_flags(p, WindowFlags)


@declared(kw_only=True)
class WindowFlags:
    """A window to create, as given: the control plane checks it (one rule, one place)."""

    nodes: str | None = setting(default=None, help="create: the Slurm nodes, a hostlist such as gpu[01-08]")
    start: str = setting(default="now", help="create: `now` or an RFC 3339 time with offset")
    duration: str | None = setting(default=None, help="create: how long, e.g. 90m, 4h, 1h30m, 1d")
    reason: str | None = setting(default=None, help="create: why (kept in the reservation's comment)")


@dataclass(frozen=True)
class MaintenanceSettings:
    action: str
    name: str | None
    control_plane: ControlPlaneClient
    body: dict[str, str]

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MaintenanceSettings:
        control_plane = ControlPlaneClient.from_args(args)
        body: dict[str, str] = {}
        window = settings_from(WindowFlags, args)
        if args.action == "create":
            for f in ("nodes", "duration", "reason"):
                if not getattr(window, f):
                    raise ConfigError(f"create needs --{f}")
            body = {
                "nodes": str(window.nodes),
                "start": window.start,
                "duration": str(window.duration),
                "reason": str(window.reason),
            }
            if args.name:
                body["name"] = args.name
        elif args.action == "delete" and not args.name:
            raise ConfigError("delete needs the window's NAME")
        elif args.action == "list" and args.name:
            raise ConfigError("list takes no NAME")
        return cls(args.action, args.name, control_plane, body)

    def request(self) -> Request:
        if self.action == "create":
            return Request(method="POST", path="/v1/maintenance", body=self.body)
        if self.action == "delete":
            return Request(method="DELETE", path=f"/v1/maintenance/{self.name}")
        return Request(method="GET", path="/v1/maintenance")


def render(window: dict[str, Any]) -> list[str]:
    state = "active" if window["active"] else "scheduled"
    lines = [
        f"{window['name']}  {window['start']} -> {window['end']}  {state}"
        f"  ({window['source']}) {window['reason']}"
    ]
    for node, report in sorted(window["node_states"].items()):
        lines.append(f"  {node:<16} {report['detail']}")
    return lines


def main(args: argparse.Namespace) -> int:
    settings = MaintenanceSettings.from_args(args)

    def show(body: Any) -> None:
        if settings.action == "list":
            for window in body["windows"]:
                print("\n".join(render(window)))
            if not body["windows"]:
                print("no maintenance windows")
        elif settings.action == "create":
            print("\n".join(render(body)))
        else:
            print(f"deleted {body['deleted']}: its drains are undone as the control plane's next cycle runs")

    return run("maintenance", settings.control_plane, settings.request(), show)
