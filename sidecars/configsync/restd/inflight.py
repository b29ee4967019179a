"""What slurmrestd's port holds, read from the kernel's socket tables of the pod's network namespace
(config-sync shares it with slurmrestd's container, not its processes): the connections it still
serves, and which listening socket is there (its inode: a restarted slurmrestd has a new one).

A connection counts from the kernel's handshake (in the accept queue) until slurmrestd closes it: a
request in flight, or an idle kept-alive connection a client may still send on. Linear in the
tables' size, read line by line, capped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sidecars.configsync.settings import PORT_TABLES

TABLES = PORT_TABLES
MAX_LINES = 1_000_000  # ~150 MB of table: far beyond a pod's sockets; the rest is not read
LISTEN = "0A"
# the server side of a connection slurmrestd has not closed: established (accepted or queued), a
# handshake under way, or the client done sending while the reply may still be written
SERVING = frozenset({"01", "03", "08"})


@dataclass(frozen=True, slots=True)
class PortState:
    serving: int  # connections open on the port's server side
    listener: int | None  # the inode of the listening socket; None: nothing listens


def read(port: int, tables: Iterable[Path] = TABLES) -> PortState:
    """The port's state now (blocking file reads: call it off the event loop)."""
    want = f":{port:04X}"
    serving, listener = 0, None
    for table in tables:
        try:
            with open(table, encoding="ascii", errors="replace") as lines:
                next(lines, None)  # the header
                for n, line in enumerate(lines):
                    if n >= MAX_LINES:
                        break
                    fields = line.split(maxsplit=10)
                    if len(fields) < 10 or not fields[1].endswith(want):
                        continue
                    if fields[3] == LISTEN:
                        listener = int(fields[9]) if fields[9].isdigit() else 0
                    elif fields[3] in SERVING:
                        serving += 1
        except FileNotFoundError:  # no IPv6 in this namespace
            continue
    return PortState(serving, listener)
