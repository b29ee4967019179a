"""Ports for a dev cluster's daemons, leased so that parallel clusters never pick the same ones.

A free-port check alone races: two test workers (or two runs on one machine) can both see a range
free and both start daemons on it before either binds, and the second slurmctld dies with "Address
already in use". So the range 20000-32000 (below the ephemeral range, where outgoing connections
take their ports) is cut into blocks, and a cluster holds an flock on each block it uses for as long
as it lives. An flock belongs to the open file and ends with the process, SIGKILL included, so no
lease outlives its owner and there is nothing to clean up.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

LOW, HIGH = 20000, 32000
BLOCK = 32


class PortsUnavailable(RuntimeError):
    """No free range of the size asked for: every block is leased or has a port in use."""


def port_free(port: int) -> bool:
    for addr in ("0.0.0.0", "127.0.0.1"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((addr, port))
            except OSError:
                return False
    return True


def free_port() -> int:
    """A TCP port free on the loopback right now (bound to 0 and released), for a local server: in
    the ephemeral range, apart from the leased ones."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def leases_dir(name: str = "slurm-sidecars-ports") -> Path:
    """The machine-wide directory of the lease lock files named `name` (ports; netblocks.py's too)."""
    d = Path(tempfile.gettempdir()) / name
    d.mkdir(exist_ok=True)
    with contextlib.suppress(OSError):  # shared by every user's runs on this machine
        d.chmod(0o1777)
    return d


class PortLease:
    """`count` consecutive ports, free when leased and promised to no other lease until `release()`."""

    def __init__(self, ports: list[int], fds: list[int]) -> None:
        self.ports = ports
        self._fds = fds

    def release(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the file ends its flock

    def __enter__(self) -> PortLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _hold(d: Path, block: int) -> int | None:
    fd = os.open(d / f"{block}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def lease_ports(count: int, rng: random.Random | None = None, lock_dir: Path | None = None) -> PortLease:
    """Lease `count` consecutive free ports in whole blocks, tried in random order."""
    if count < 1 or count > HIGH - LOW:
        raise ValueError(f"cannot lease {count} ports")
    rng = rng or random.Random()
    d = lock_dir or leases_dir()
    span = -(-count // BLOCK)
    starts = list(range(LOW // BLOCK, HIGH // BLOCK - span + 1))
    rng.shuffle(starts)
    for first in starts:
        fds: list[int] = []
        for block in range(first, first + span):
            fd = _hold(d, block)
            if fd is None:
                break
            fds.append(fd)
        lease = PortLease(list(range(first * BLOCK, first * BLOCK + count)), fds)
        if len(fds) == span and all(port_free(p) for p in lease.ports):
            return lease
        lease.release()
    raise PortsUnavailable(f"no {count} consecutive free ports in {LOW}-{HIGH}")
