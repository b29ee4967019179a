"""A throwaway slurmdbd: Slurm's own reading of a candidate slurmdbd.conf, without the database.

`slurmdbd -D` reads its whole file first and dies of what it cannot take, in its own words, within
tens of milliseconds (measured on 22.05: an unknown key, a malformed line, `DebugLevel=bogus`, a
bad purge value, mode 0644, an owner other than SlurmUser, a missing auth plugin). Only then does it
load its storage plugin and connect to the database. The caller points StorageHost/StoragePort at
a port held closed here (`closed_port`), so the first connection is refused and slurmdbd says so
("mysql_real_connect failed", then "The database must be up ..."): that line means the file was
taken, and the daemon is killed there. It never reaches a database, and, connected to none, never
opens its own port. The caller also gives it a PidFile of its own: slurmdbd signals the pid that
its PidFile names at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sidecars.slurm.runner import SlurmMetrics, spawn

SLURMDBD = ("slurmdbd",)
OUTPUT = "slurmdbd.out"
# what slurmdbd prints once the file is read and the storage plugin tries its (refused) connection
CONNECTING = re.compile(r"mysql_real_connect failed|The database must be up|Can't connect to")
FATAL = re.compile(r"\bfatal: ")
SAID = re.compile(r"\b(?:fatal|error): .*")
# a parse error quotes the whole line, which may be the StoragePass line: never repeated
QUOTED_LINE = re.compile(r'(line \d+): ".*"')
MAX_SAID = 1500


@dataclass(frozen=True, slots=True)
class DbdParse:
    ok: bool | None  # None: no verdict within the timeout
    said: str  # slurmdbd's own error lines, for a refusal (quoted file lines cut)
    seconds: float


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A port of 127.0.0.1 bound and never listened on: a connection to it is refused, and nothing
    else can take it while the block runs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def said(output: str) -> str:
    """slurmdbd's error and fatal lines, without its prefix or any quoted file line, and without
    what it says of munge (the throwaway's authentication is not what is judged) unless that is all."""
    lines = [QUOTED_LINE.sub(r"\1", m.group(0)) for m in SAID.finditer(output)]
    judged = [line for line in lines if "munge" not in line.lower()]
    return "; ".join(judged or lines)[-MAX_SAID:]


async def read_conf(
    command: Sequence[str],
    conf_dir: Path,
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    metrics: SlurmMetrics | None = None,
) -> DbdParse:
    """Run `command -D` on the slurmdbd.conf in `conf_dir` (SLURM_CONF names that directory) until
    it refuses the file, dies, or reaches for the database; it is killed whatever happens."""
    out = conf_dir / OUTPUT
    out.unlink(missing_ok=True)
    environ = {**(env if env is not None else os.environ), "SLURM_CONF": str(conf_dir / "slurm.conf")}
    started = time.monotonic()
    async with spawn([*command, "-D"], stdout=out, env=environ, metrics=metrics) as child:
        while True:
            ended = child.returncode is not None
            text = out.read_text(errors="replace")
            seconds = time.monotonic() - started
            if CONNECTING.search(text) and not FATAL.search(text):
                return DbdParse(True, "", seconds)
            if FATAL.search(text) or ended:
                if not ended:  # its last words may still be on their way
                    with contextlib.suppress(TimeoutError):
                        await child.wait(1.0)
                    text = out.read_text(errors="replace")
                why = said(text) or f"slurmdbd exited with {child.returncode} and said nothing"
                return DbdParse(False, why, seconds)
            if seconds >= timeout:
                return DbdParse(None, f"slurmdbd gave no verdict within {timeout:g}s", seconds)
            await asyncio.sleep(0.02)
