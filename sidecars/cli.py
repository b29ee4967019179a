"""`slurm-sidecars <role> ...`: one command, several roles. Nothing runs at import time."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sidecars.runtime import logs, tlsroots
from sidecars.runtime.daemon import EXIT_CONFIG
from sidecars.runtime.settings import ConfigError, add_flags


@dataclass(frozen=True)
class Command:
    """A subcommand: `module` is its package's `main.py`, with `configure(parser)` and
    `main(args) -> exit code` (the same two names in the same place for every role). It is imported
    only when its subcommand runs, so a worker agent never loads the control plane's Kubernetes
    client (kubernetes-asyncio alone is ~35 MB of resident memory in every pod)."""

    name: str
    help: str
    module: str
    # in every pod (thousands of processes): loads the system's CA roots only when it uses them
    per_pod: bool = False


COMMANDS = (
    Command("config-sync", "apply ConfigMap/Secret changes to slurmctld safely", "sidecars.configsync.main"),
    Command(
        "config-guard",
        "before slurmctld starts: put the last verified set back if the one on disk was never verified",
        "sidecars.configsync.guard.main",
    ),
    Command("worker", "the agent beside every slurmd", "sidecars.worker.main", per_pod=True),
    Command("drain-hook", "preStop hook: drain this node and wait", "sidecars.drainhook.main"),
    Command(
        "control-plane",
        "one per cluster: fleet view, drains, scale-in order",
        "sidecars.controlplane.main",
    ),
    Command(
        "maintenance",
        "planned maintenance windows: create, list, delete",
        "sidecars.operator.maintenance.main",
    ),
    Command(
        "upgrade",
        "a rolling upgrade of the workers, paced by a drain budget",
        "sidecars.operator.upgrade.main",
    ),
    Command(
        "probe",
        "exec probe: GET /livez or /readyz; a controller; slurmctld's metrics",
        "sidecars.probe.main",
        per_pod=True,
    ),
    Command(
        "check-secret", "init step: refuse an empty, short or placeholder key", "sidecars.check_secret.main"
    ),
    Command(
        "client-conf",
        "init step: render the client slurm.conf (controllers, auth, accounting; no PluginDir)",
        "sidecars.clientconf.main",
    ),
    Command(
        "state",
        "copy slurmctld's StateSaveLocation aside, or put a copy back (run while slurmctld is stopped)",
        "sidecars.statecopy.main",
    ),
    Command("status", "a human-readable view of the cluster", "sidecars.operator.status.main"),
    Command("plan", "what a config change would do, before it is merged", "sidecars.operator.plan.main"),
    Command("demo", "run everything on this machine against a real Slurm", "sidecars.demo.main"),
)


def _role(cmd: Command) -> Any:
    with tlsroots.roots_deferred() if cmd.per_pod else contextlib.nullcontext():
        return importlib.import_module(cmd.module)


def build_parsers(
    only: str | None = None,
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser with every subcommand listed, and each subcommand's own parser by name; flags are
    added for `only` (every one when None)."""
    parser = argparse.ArgumentParser(prog="slurm-sidecars", description=__doc__)
    add_flags(parser, logs.LogSettings)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parsers = {}
    for cmd in COMMANDS:
        parsers[cmd.name] = p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        if only is None or cmd.name == only:
            _role(cmd).configure(p)
    return parser, parsers


def build_parser(only: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    """The parser with every subcommand listed, and the commands by name (see `build_parsers`)."""
    parser, _ = build_parsers(only)
    return parser, {cmd.name: cmd for cmd in COMMANDS}


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """Flags and positionals in any order after the command's name, as kubectl takes them:
    `maintenance delete --token-file F NAME` as well as `maintenance delete NAME --token-file F`.
    argparse alone gives an optional positional (`nargs="?"`) nothing when a flag follows the
    positional before it, then refuses the name at the end as unrecognized. The flags before the
    name (--log-level, --log-format) are the whole command's."""
    argv = list(argv)
    parser, parsers = build_parsers(only=_chosen(argv))
    at = next((i for i, a in enumerate(argv) if a in parsers), None)
    if at is None:
        return parser.parse_args(argv)
    args = parser.parse_args(argv[:at])
    args.command = argv[at]
    parsed: argparse.Namespace = parsers[argv[at]].parse_intermixed_args(argv[at + 1 :], namespace=args)
    return parsed


def _chosen(argv: Sequence[str]) -> str:
    """The subcommand named in argv (the first word that is one), or "" when there is none."""
    names = {c.name for c in COMMANDS}
    return next((a for a in argv if a in names), "")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse(argv)
    except SystemExit as exc:  # argparse: 0 for --help, 2 for a bad invocation
        return int(exc.code or 0)
    if not args.command:
        build_parsers(only="")[0].print_help(sys.stderr)
        return EXIT_CONFIG
    cmd = next(c for c in COMMANDS if c.name == args.command)
    try:
        log = logs.asked(args)
        logs.configure(json=logs.FORMATS[log.log_format], level=log.log_level)
        return int(_role(cmd).main(args))
    except ConfigError as exc:
        print(f"slurm-sidecars {cmd.name}: {exc}", file=sys.stderr)
        return EXIT_CONFIG


def self_argv(*args: str) -> list[str]:
    """The argv that runs this command with the running interpreter (for the demo, tests and
    benchmarks that start the sidecars as the processes they are in production)."""
    return [sys.executable, "-m", "sidecars", *args]
