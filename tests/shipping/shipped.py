"""Reading what we ship (Dockerfiles, pyproject, the CLI's table) for the static checks."""

from __future__ import annotations

import argparse
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from sidecars.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
DOCKERFILES = sorted(IMAGES.glob("*.Dockerfile"))

# The stable interface (DESIGN.md, "Interfaces"): each role's flags. What we ship may use only these;
# once a role is wired in sidecars/cli.py its parser must also have them (a renamed flag fails the
# checks), and until then this list stands in for it. `status --config-sync/--timeout-seconds`
# come with the status command itself (issue 6).
STABLE_FLAGS: dict[str, set[str]] = {
    # the viewer's credential (issue 20): config-sync's /status and /history off loopback, and the
    # control plane's page and reads
    "config-sync": {"--source", "--target", "--state-dir", "--http", "--viewer-token-file"},
    "worker": {"--node-name", "--http", "--socket", "--control-plane", "--token-file", "--job-mapping-dir"},
    "drain-hook": {"--socket", "--timeout-seconds", "--reason"},
    "control-plane": {"--http", "--token-file", "--viewer-token-file"},
    "probe": {"--url"},
    "status": {"--control-plane", "--token-file", "--config-sync", "--timeout-seconds"},
    "demo": {"--tour"},
    # the client slurm.conf of a sidecar outside slurmctld's pod (issue 35)
    "client-conf": {"--from", "--out"},
}


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    args: str


def instructions(path: Path) -> list[Instruction]:
    """A Dockerfile's instructions with continuation lines joined and comments dropped."""
    out: list[Instruction] = []
    buf, start = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if not buf:
            start = number
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        keyword, _, args = buf.partition(" ")
        out.append(Instruction(start, keyword.upper(), args.strip()))
        buf = ""
    return out


def pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def cli_parsers() -> dict[str, argparse.ArgumentParser]:
    """Each wired subcommand's parser, as `slurm-sidecars` builds it."""
    parser, _ = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def wired_commands() -> set[str]:
    _, commands = build_parser()
    return set(commands)  # every role is wired now


def all_commands() -> set[str]:
    _, commands = build_parser()
    return set(commands)


def parser_flags(command: str) -> set[str]:
    parser = cli_parsers()[command]
    return {opt for a in parser._actions for opt in a.option_strings if opt.startswith("--")}


def known_flags(command: str) -> set[str]:
    """The flags what we ship may pass to `command`: the stable ones, and once the role is wired,
    only those its parser really has."""
    stable = STABLE_FLAGS.get(command, set())
    return stable & parser_flags(command) if command in wired_commands() else stable


def env_flag(name: str) -> str | None:
    """`SIDECARS_TOKEN_FILE` -> `--token-file`; None for a variable that is not a flag's."""
    m = re.fullmatch(r"SIDECARS_([A-Z0-9_]+)", name)
    return "--" + m.group(1).lower().replace("_", "-") if m else None
