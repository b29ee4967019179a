"""Parallel dev clusters never share a port: a range is leased, not merely seen free."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sidecars.devcluster.ports import BLOCK, PortLease, PortsUnavailable, lease_ports


class InOrder(random.Random):
    """Blocks tried lowest first: which block a lease gets is then known."""

    def shuffle(self, x: object) -> None:
        return None


def test_two_leases_made_alike_get_different_ports(tmp_path: Path) -> None:
    # two test workers that happen to draw the same range: the second must not get it
    with lease_ports(5, random.Random(7), tmp_path) as a, lease_ports(5, random.Random(7), tmp_path) as b:
        assert len(a.ports) == len(b.ports) == 5
        assert not set(a.ports) & set(b.ports)
        assert a.ports == list(range(a.ports[0], a.ports[0] + 5))


def _held_and_bound() -> tuple[PortLease, socket.socket]:
    """A port that is ours: leased in the machine's shared lock dir (no dev cluster of a parallel
    test takes it) and bound here, so a lease made elsewhere must find it in use."""
    lease = lease_ports(1, InOrder())
    s = socket.socket()
    try:
        # as the daemons bind (and as a lease checks): a recent cluster's connections on this port
        # may still be in TIME_WAIT
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", lease.ports[0]))
        s.listen()
    except BaseException:
        s.close()
        lease.release()
        raise
    return lease, s


def test_a_port_in_use_is_not_leased(tmp_path: Path) -> None:
    lease, s = _held_and_bound()
    with lease, s:
        taken = lease.ports[0]
        # another lock dir: the block itself is free there, only its port is in use
        for _ in range(20):
            with lease_ports(3, random.Random(), tmp_path) as other:
                assert taken not in other.ports
        with lease_ports(BLOCK, InOrder(), tmp_path) as first:
            assert taken // BLOCK != first.ports[0] // BLOCK


def test_a_range_wider_than_a_block_holds_every_block_it_spans(tmp_path: Path) -> None:
    wide = lease_ports(BLOCK + 1, InOrder(), tmp_path)
    with wide, lease_ports(1, InOrder(), tmp_path) as one:
        assert one.ports[0] // BLOCK not in {wide.ports[0] // BLOCK, wide.ports[-1] // BLOCK}


def test_a_lease_ends_with_its_process_even_by_sigkill(tmp_path: Path) -> None:
    code = (
        "import time; from pathlib import Path; from sidecars.devcluster.ports import lease_ports;"
        f"l = lease_ports(1, lock_dir=Path({str(tmp_path)!r})); print(l.ports[0], flush=True);"
        "time.sleep(120)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        lock = tmp_path / f"{port // BLOCK}.lock"
        fd = os.open(lock, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            child.send_signal(signal.SIGKILL)
            child.wait(10)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: nothing left to clean up
        finally:
            os.close(fd)
    finally:
        child.kill()
        child.wait(10)
        if child.stdout is not None:
            child.stdout.close()


def test_no_room_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot lease 0"):
        lease_ports(0, lock_dir=tmp_path)
    lease, s = _held_and_bound()
    with lease, s, pytest.raises(PortsUnavailable, match="no 12000 consecutive free ports"):
        lease_ports(12000, lock_dir=tmp_path)  # the whole range, and one port of it is in use
