"""One controller asked alone, on every release (no HTTP needed): in control, a standby, or down.

Slurm's clients try every `SlurmctldHost` in turn and fall through past a standby, so an ordinary
command says nothing about one given controller. Through a configuration that names only that one
they cannot fall through: its ping answers for it alone (a standby answers pings too), and any other
request is served by a controller in control only; a standby refuses it with "Slurm backup
controller in standby mode" (measured on 22.05, 24.11 and 26.05). A down controller fails its ping
at once, where any other request would retry for `MessageTimeout` first (9 s measured).

The configuration naming only it is a copy in a private temporary directory, beside links to every
other file of the real one's directory, so keys (`slurm.key`), includes and `gres.conf` resolve as
they would; the directory (under the commands' `TMPDIR`) is gone when the answer is in.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sidecars.protocol.configsync import HaRole
from sidecars.slurm.errors import SlurmTimeout
from sidecars.slurm.runner import run

DEFAULT_CONF = Path("/etc/slurm/slurm.conf")
ASKED = "asked"  # what came of a takeover or shutdown request Slurm took (else "failed: ...")
STANDBY_WORDS = "in standby mode"  # Slurm's ESLURM_IN_STANDBY_MODE text
# a small request that only a controller in control serves, whose answer grows with nothing
ASK = ("scontrol", "show", "licenses")

_HOST_LINE = re.compile(r"^\s*SlurmctldHost\s*=\s*(?P<value>[^\s#]+)", re.IGNORECASE)
_COMM_LINE = re.compile(r"^\s*CommunicationParameters\s*=\s*(?P<value>[^\s#]+)", re.IGNORECASE)
_LEGACY_LINE = re.compile(r"^\s*(ControlMachine|BackupController)\s*=", re.IGNORECASE)

Role = HaRole  # the words on the wire, stated in sidecars/protocol


class NotAController(ValueError):
    """The configuration names no such controller, or names its controllers in a way not read here."""


@dataclass(frozen=True, slots=True)
class ControllerAnswer:
    role: Role  # UNKNOWN: it answered its ping but neither served nor refused as a standby
    detail: str  # Slurm's own words, or why there were none


def conf_path(env: Mapping[str, str] | None = None) -> Path:
    """The slurm.conf Slurm's commands read with this environment (`SLURM_CONF` honoured)."""
    return Path((os.environ if env is None else env).get("SLURM_CONF") or DEFAULT_CONF)


def communication_parameters(conf_text: str) -> str:
    """slurm.conf's `CommunicationParameters` ("" when not set; the last line given wins)."""
    found = [m["value"] for ln in conf_text.splitlines() if (m := _COMM_LINE.match(ln))]
    return found[-1] if found else ""


def host_names(conf_text: str) -> list[str]:
    """The `SlurmctldHost` names of a slurm.conf, in order (`name(address)` gives `name`)."""
    return [m["value"].split("(", 1)[0] for ln in conf_text.splitlines() if (m := _HOST_LINE.match(ln))]


def host_addresses(conf_text: str) -> set[str]:
    """Every name and address the `SlurmctldHost` lines give (`name(address)` gives both): where a
    controller of this cluster may be reached, as Slurm itself writes it (no DNS asked)."""
    found: set[str] = set()
    for ln in conf_text.splitlines():
        if m := _HOST_LINE.match(ln):
            name, _, rest = m["value"].partition("(")
            found.add(name)
            if rest:
                found.update(a for a in rest.rstrip(")").split(",") if a)
    return found


def naming_only(conf_text: str, name: str) -> str:
    """slurm.conf with every `SlurmctldHost` line but `name`'s dropped; the rest kept as written."""
    if any(_LEGACY_LINE.match(ln) for ln in conf_text.splitlines()):
        raise NotAController(
            "slurm.conf names its controllers with ControlMachine/BackupController; use SlurmctldHost"
        )
    names = host_names(conf_text)
    if name not in names:
        raise NotAController(
            f"no SlurmctldHost {name!r} in slurm.conf (it names: {', '.join(names) or 'none'})"
        )
    kept = [
        ln
        for ln in conf_text.splitlines()
        if not (m := _HOST_LINE.match(ln)) or m["value"].split("(", 1)[0] == name
    ]
    return "\n".join(kept) + "\n"


def shadow(conf: Path, text: str, into: Path) -> Path:
    """`into` as `conf`'s directory with `text` in place of slurm.conf: every other entry is a link
    to the real one (keys, includes, gres.conf resolve as they would); returns the copy's path."""
    for entry in conf.parent.iterdir():
        if entry.name != conf.name:
            (into / entry.name).symlink_to(entry)
    copy = into / conf.name
    copy.write_text(text)
    return copy


async def ask_alone(name: str, timeout: float, env: Mapping[str, str] | None = None) -> ControllerAnswer:
    """What the controller `name` (a `SlurmctldHost` name) is now, asked alone. Never raises for a
    controller that does not answer (that is the answer); raises NotAController for a name the
    configuration does not give, and OSError when the configuration cannot be read."""
    environ = dict(os.environ if env is None else env)
    conf = conf_path(environ)
    deadline = time.monotonic() + timeout
    # in the commands' own TMPDIR: a Slurm in a chroot sees only what is mounted there
    with tempfile.TemporaryDirectory(prefix="slurm-sidecars-ask-", dir=environ.get("TMPDIR")) as tmp:
        alone = {**environ, "SLURM_CONF": str(shadow(conf, naming_only(conf.read_text(), name), Path(tmp)))}
        try:
            ping = await run(["scontrol", "ping"], env=alone, timeout=timeout, check=False)
            said = (ping.stdout + ping.stderr).strip()
            if ping.returncode != 0 or " is UP" not in said:
                return ControllerAnswer(
                    Role.DOWN, said.splitlines()[0] if said else f"scontrol ping: exit {ping.returncode}"
                )
            asked = await run(ASK, env=alone, timeout=max(deadline - time.monotonic(), 0.1), check=False)
        except SlurmTimeout as exc:
            return ControllerAnswer(Role.DOWN, f"{' '.join(exc.argv[:3])}: {exc.message}")
    said = (asked.stderr or asked.stdout).strip()
    if asked.returncode == 0:
        return ControllerAnswer(Role.IN_CONTROL, f"{name} serves requests")
    if STANDBY_WORDS in said.lower():
        return ControllerAnswer(Role.STANDBY, said)
    return ControllerAnswer(Role.UNKNOWN, said or f"{' '.join(ASK)}: exit {asked.returncode}")


async def ask_takeover(
    index: int, timeout: float, env: Mapping[str, str] | None = None
) -> tuple[list[str], str]:
    """Ask the controller at `index` of SlurmctldHost to take control (`scontrol takeover INDEX`);
    the argv and what came of it ("asked", or "failed: <Slurm's words>"). Never raises for Slurm's
    refusal or silence: that is the answer."""
    argv = ["scontrol", "takeover", str(index)]
    try:
        done = await run(argv, env=env, timeout=timeout, check=False)
    except SlurmTimeout as exc:
        return argv, f"failed: {exc.message}"
    return argv, ASKED if done.returncode == 0 else f"failed: {(done.stderr or done.stdout).strip()}"
