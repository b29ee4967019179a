"""Addresses for a dev cluster's controllers, leased so that parallel clusters never pick the same ones.

An HA dev cluster runs each slurmctld in a network namespace of its own, joined to the host by a
veth pair (controllers.py). Their addresses come from 198.18.0.0/15, the block RFC 2544 sets aside
for benchmarking test networks, not real ones; a block that overlaps a route of this machine is
stepped around all the same, so a route we add shadows nothing.
The block is cut into /28s, one per cluster, leased with an flock as ports.py leases ports: the
lock ends with its holder, SIGKILL included, and the kernel removes the namespaces, the veths and
their routes when the cluster's processes end, so a lease never outlives what it covers.

In a /28 starting at B, controller i (0 to 3) has the /30 at B+4i: its host end is B+4i+1, its own
address B+4i+2. The host end of controller 0 is also where the controllers reach the slurmds
(`NodeAddr`): an address of the host that every controller reaches through its own veth.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import random
from dataclasses import dataclass
from pathlib import Path

from sidecars.devcluster.ports import leases_dir

NETWORK = ipaddress.IPv4Network("198.18.0.0/15")
BLOCK_PREFIX = 28
MAX_CONTROLLERS = 4  # a /30 each in a /28


class AddressesUnavailable(RuntimeError):
    """Every address block is leased or already in use on this machine."""


@dataclass(frozen=True, slots=True)
class AddressBlock:
    """One cluster's /28: its index (which also names its links) and the addresses in it."""

    index: int

    @property
    def network(self) -> ipaddress.IPv4Network:
        size = 2 ** (32 - BLOCK_PREFIX)
        return ipaddress.IPv4Network((int(NETWORK.network_address) + self.index * size, BLOCK_PREFIX))

    def _at(self, offset: int) -> str:
        return str(self.network.network_address + offset)

    def host_address(self, controller: int) -> str:
        """The host's end of controller `controller`'s veth."""
        return self._at(4 * controller + 1)

    def controller_address(self, controller: int) -> str:
        return self._at(4 * controller + 2)

    @property
    def node_address(self) -> str:
        """The slurmds' `NodeAddr`: a host address every controller reaches."""
        return self.host_address(0)

    def host_link(self, controller: int) -> str:
        """The host end's interface name (at most 15 characters: `slc` + 4 digits + a letter)."""
        return f"slc{self.index}{'abcd'[controller]}"


def in_use(block: AddressBlock, addresses: list[ipaddress.IPv4Interface]) -> bool:
    """Whether the block overlaps an address of this machine or one of its links is already there
    (left by something that is not ours: never touched, only stepped around)."""
    if any(a.network.overlaps(block.network) for a in addresses):
        return True
    return any(Path("/sys/class/net", block.host_link(i)).exists() for i in range(MAX_CONTROLLERS))


def host_addresses() -> list[ipaddress.IPv4Interface]:
    """The networks this machine routes (main table of its network namespace): every address with
    a prefix puts its network there, so a block that overlaps none is not in use here."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/route").read_text().splitlines()[1:]:
            f = line.split()
            dest, mask = int(f[1], 16), int(f[7], 16)
            net = ipaddress.IPv4Address(dest.to_bytes(4, "little"))
            bits = bin(mask).count("1")
            if bits:  # the default route covers everything and says nothing about use
                found.append(ipaddress.IPv4Interface((net, bits)))
    return found


class AddressLease:
    """A leased block, promised to no other lease until `release()`."""

    def __init__(self, block: AddressBlock, fd: int) -> None:
        self.block = block
        self._fd: int | None = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the file ends its flock


def lease_block(rng: random.Random | None = None, lock_dir: Path | None = None) -> AddressLease:
    """Lease a free /28 of NETWORK, blocks tried in random order."""
    rng = rng or random.Random()
    d = lock_dir or leases_dir("slurm-sidecars-nets")
    count = 2 ** (BLOCK_PREFIX - NETWORK.prefixlen)
    used = host_addresses()
    for index in rng.sample(range(count), count):
        fd = os.open(d / f"{index}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        block = AddressBlock(index)
        if not in_use(block, used):
            return AddressLease(block, fd)
        os.close(fd)
    raise AddressesUnavailable(f"no free /{BLOCK_PREFIX} in {NETWORK}")
