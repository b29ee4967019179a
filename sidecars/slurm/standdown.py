"""One controller asked alone to shut down, and whether its slurmctld is gone (its state saved).

Why (measured on 24.11.5 and 26.05.5, docs/ha.md): a primary that starts while a backup is in
control asks it for control back (REQUEST_CONTROL). The backup answers only after about 29 s
("REQUEST_CONTROL reply but backup not completely done relinquishing control. Old state possible")
and saves its whole state *after* that answer, while the primary, answered, reads the same
StateSaveLocation at once: the two meet within milliseconds. 26.05 saves each file by renaming
`job_state` to `job_state.old` and then `job_state.new` to `job_state`, and reads only `job_state`:
a read between the two renames finds no file, and a controller without slurmdbd then starts with no
jobs at all (24.11 falls back to `job_state.old`). So a returning primary must not start while
another controller is in control: that one is asked to shut down first (a shutdown saves its state
before the process ends), and the primary starts once nothing listens at its address.

`scontrol shutdown slurmctld` sends a shutdown to every controller it knows; through a configuration
that names only the one meant (`standby.naming_only`), it reaches that one alone.

A controller whose address refuses a connection has no slurmctld listening: it ended, after its
saves (slurmctld closes its listening sockets last). One that accepts but does not answer (a
shutdown in progress holds its connections) is not gone, and one that cannot be reached at all is
not known to be gone: only a refusal counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from sidecars.runtime.waits import within
from sidecars.slurm.errors import SlurmTimeout
from sidecars.slurm.runner import run
from sidecars.slurm.standby import ASKED, NotAController, conf_path, naming_only, shadow

__all__ = ["Listening", "ask_shutdown", "listening"]

DEFAULT_PORT = 6817  # slurm.conf(5): SlurmctldPort's default
_HOST_LINE = re.compile(
    r"^\s*SlurmctldHost\s*=\s*(?P<name>[^\s#(]+)(?:\((?P<addr>[^)\s]+)\))?", re.IGNORECASE
)
_PORT_LINE = re.compile(r"^\s*SlurmctldPort\s*=\s*(?P<first>\d+)", re.IGNORECASE)

Listening = Literal["listens", "refused", "unknown"]


def address(conf_text: str, name: str) -> tuple[str, int]:
    """Where controller `name` listens: its `SlurmctldHost` address (its name without one) and the
    first port of `SlurmctldPort` (slurmctld listens on every port of a range)."""
    lines = conf_text.splitlines()
    hosts = {m["name"]: m["addr"] or m["name"] for ln in lines if (m := _HOST_LINE.match(ln))}
    if name not in hosts:
        raise NotAController(f"no SlurmctldHost {name!r} in slurm.conf")
    ports = [int(m["first"]) for ln in lines if (m := _PORT_LINE.match(ln))]
    return hosts[name], ports[-1] if ports else DEFAULT_PORT


async def listening(name: str, timeout: float, env: Mapping[str, str] | None = None) -> Listening:
    """Whether anything listens at controller `name`'s address: "refused" only when its host said no
    (no slurmctld there); "unknown" when it could not be reached or did not say within `timeout`."""
    host, port = address(conf_path(env).read_text(), name)
    try:
        _, writer = await within(asyncio.open_connection(host, port), timeout)
    except ConnectionRefusedError:
        return "refused"
    except (OSError, TimeoutError):
        return "unknown"
    writer.close()
    with contextlib.suppress(OSError, TimeoutError):  # it listened: how the close went says nothing more
        await within(writer.wait_closed(), timeout)
    return "listens"


async def ask_shutdown(
    name: str, timeout: float, env: Mapping[str, str] | None = None
) -> tuple[list[str], str]:
    """Ask controller `name`, alone, to shut down (`scontrol shutdown slurmctld`); the argv and what
    came of it ("asked", or "failed: <Slurm's words>"). Never raises for Slurm's refusal or silence."""
    environ = dict(os.environ if env is None else env)
    conf = conf_path(environ)
    argv = ["scontrol", "shutdown", "slurmctld"]
    with tempfile.TemporaryDirectory(prefix="slurm-sidecars-ask-", dir=environ.get("TMPDIR")) as tmp:
        alone = {**environ, "SLURM_CONF": str(shadow(conf, naming_only(conf.read_text(), name), Path(tmp)))}
        try:
            done = await run(argv, env=alone, timeout=timeout, check=False)
        except SlurmTimeout as exc:
            return argv, f"failed: {exc.message}"
    return argv, ASKED if done.returncode == 0 else f"failed: {(done.stderr or done.stdout).strip()}"
