"""`slurm-sidecars <role> ...`: one command, several roles. Nothing runs at import time."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sidecars.runtime import logs
from sidecars.runtime.daemon import EXIT_CONFIG
from sidecars.runtime.settings import ConfigError


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None] | None  # None: not built yet
    run: Callable[[argparse.Namespace], int] | None
    issue: int = 0


def _commands() -> list[Command]:
    # imported here, not at module level, so `--help` and unrelated roles stay cheap
    from sidecars import demo, drainhook, probe, status
    from sidecars.configsync import main as config_sync
    from sidecars.controlplane import service as control_plane
    from sidecars.worker import service as worker

    return [
        Command(
            "config-sync",
            "apply ConfigMap/Secret changes to slurmctld safely",
            config_sync.configure,
            config_sync.main,
        ),
        Command("worker", "the agent beside every slurmd", worker.configure, worker.main),
        Command("drain-hook", "preStop hook: drain this node and wait", drainhook.configure, drainhook.main),
        Command(
            "control-plane",
            "one per cluster: fleet view, drains, scale-in order",
            control_plane.configure,
            control_plane.main,
        ),
        Command("probe", "exec probe: GET /livez or /readyz", probe.configure, probe.main),
        Command("status", "a human-readable view of the cluster", status.configure, status.main),
        Command("demo", "run everything on this machine against a real Slurm", demo.configure, demo.main),
    ]


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    parser = argparse.ArgumentParser(prog="slurm-sidecars", description=__doc__)
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", default="auto", choices=["auto", "json", "console"])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands = {}
    for cmd in _commands():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        if cmd.configure is not None:
            cmd.configure(p)
        else:
            p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        commands[cmd.name] = cmd
    return parser, commands


def main(argv: Sequence[str] | None = None) -> int:
    parser, commands = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: 0 for --help, 2 for a bad invocation
        return int(exc.code or 0)
    if not args.command:
        parser.print_help(sys.stderr)
        return EXIT_CONFIG
    cmd = commands[args.command]
    if cmd.run is None:
        print(f"slurm-sidecars {cmd.name}: not available yet (issue #{cmd.issue})", file=sys.stderr)
        return EXIT_CONFIG
    logs.configure(json={"auto": None, "json": True, "console": False}[args.log_format], level=args.log_level)
    try:
        return cmd.run(args)
    except ConfigError as exc:
        print(f"slurm-sidecars {cmd.name}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
