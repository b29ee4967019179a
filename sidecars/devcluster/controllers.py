"""Several slurmctld on one machine, each at its own address, as Slinky runs a primary and backups.

Slurm tells its controllers apart by host name (a slurmctld is the `SlurmctldHost` entry that
names its host) and has each bind its entry's address, so every controller needs a host name and
an address of its own. Each gets, inside the cluster's PID namespace, a holder process that made
a network, UTS and mount namespace: its host name is the controller's, its network has the
controller's address on a veth whose other end is in the host's namespace (netblocks.py has the
addresses), and its mount namespace maps DIR/ctld to DIR/<name>, where its pid and log files live.
The controller's slurmctld is started inside those namespaces (`nsenter -t <holder>`).
In the Slinky shape they share the cluster's /run: auth/slurm's clients get their tokens from the
sack.socket of a slurmd, else of the controller started last, so one must stay reachable.

Not `ip netns add`: a named namespace is a bind mount in /run/netns that outlives whoever made
it. These namespaces belong to their processes, which die with the cluster's PID namespace (see
cluster.py), and the kernel then removes the namespaces, their veths and the routes through them,
however the owner ended. The slurmds and the clients stay in the host's network namespace and
reach each controller through its veth; the controllers reach the slurmds at a host address
(`AddressBlock.node_address`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from sidecars.devcluster.netblocks import AddressBlock
from sidecars.runtime import process

MOUNT_POINT = "ctld"  # DIR/ctld: what slurm.conf names; each controller sees its own DIR/<name> there
# DIR/<name>/etc: with `conf_per_controller`, what this controller sees as DIR/etc (its pod's /etc/slurm)
OWN_ETC = "etc"
# the names HOLDER_SCRIPT uses
HOLDER_PID_FILE = "holder.pid"
HOLDER_LOG = "holder.log"
HOSTS_FILE = "hosts"
RESOLV_FILE = "resolv.conf"
PEER_LINK = "eth0"  # the controller's end of its veth, inside its namespace
# in the holder: map the controller's dir (and, when asked, its own configuration directory over the
# cluster's), give it its own /etc/hosts (names of this cluster) and
# no name server (24.11 looks its own name up at start; a lookup must not wait on a server it
# cannot reach), take its host name, say so by writing its pid (last, so a pid file means the namespaces
# are ready), then wait forever for the cluster's end
HOLDER_SCRIPT = (
    'exec >>"$1/holder.log" 2>&1; set -e; mount --bind "$1" "$2"; mount --bind "$1/hosts" /etc/hosts; '
    'if [ -e /etc/resolv.conf ]; then mount --bind "$1/resolv.conf" /etc/resolv.conf; fi; '
    'if [ -n "$4" ]; then mount --bind "$1/etc" "$4"; fi; hostname "$3"; '
    'echo $$ >"$1/holder.pid.tmp"; mv "$1/holder.pid.tmp" "$1/holder.pid"; '
    'trap "" HUP INT TERM; while :; do sleep 3600 & wait $!; done'
)


class NetworkError(RuntimeError):
    """A controller's namespaces or links could not be made; says which command failed and how."""


@dataclass(frozen=True, slots=True)
class Controller:
    """One controller of an HA dev cluster: its host name, place in `SlurmctldHost`, and files."""

    name: str
    index: int  # 0: the configured primary; 1, 2, ...: backups, in `scontrol takeover` order
    address: str
    dir: Path  # DIR/<name>: pid file, log, holder's pid file

    @property
    def pid_file(self) -> Path:
        return self.dir / "slurmctld.pid"

    @property
    def log_file(self) -> Path:
        return self.dir / "slurmctld.log"

    @property
    def etc(self) -> Path:
        """Its own configuration directory (used with `ClusterSpec.conf_per_controller`)."""
        return self.dir / OWN_ETC


def controllers(names: list[str], block: AddressBlock, cluster_dir: Path) -> list[Controller]:
    return [Controller(n, i, block.controller_address(i), cluster_dir / n) for i, n in enumerate(names)]


def write_name_files(cs: list[Controller], block: AddressBlock, host: str) -> None:
    """Each controller's /etc/hosts (every controller, and this host at the slurmds' address) and
    its empty resolv.conf."""
    lines = ["127.0.0.1 localhost", *(f"{c.address} {c.name}" for c in cs), f"{block.node_address} {host}"]
    for c in cs:
        (c.dir / HOSTS_FILE).write_text("\n".join(lines) + "\n")
        (c.dir / RESOLV_FILE).write_text("")


def holder_argv(c: Controller, cluster_dir: Path, *, own_etc: bool = False) -> list[str]:
    """The command, run inside the cluster's namespace (and chroot), that makes the controller's
    namespaces and holds them; `setsid -f` returns at once and leaves the holder running. With
    `own_etc`, the controller reads DIR/<name>/etc where the others read DIR/etc."""
    return [
        "setsid",
        "-f",
        "unshare",
        "--net",
        "--uts",
        "--mount",
        # the cluster's mounts are private already; and in a chroot "/" is no mount point to change
        "--propagation",
        "unchanged",
        "--",
        "/bin/sh",
        "-c",
        HOLDER_SCRIPT,
        "holder",
        str(c.dir),
        str(cluster_dir / MOUNT_POINT),
        c.name,
        str(cluster_dir / "etc") if own_etc else "",
    ]


def enter_argv(holder_pid: int, chroot: bool) -> list[str]:
    """The prefix that runs a command in the controller's namespaces (PID namespace: the cluster's)."""
    root = ["-r", "-w"] if chroot else []
    return ["nsenter", "-t", str(holder_pid), "-p", "-m", "-n", "-u", *root, "--"]


async def _ip(*argv: str) -> None:
    try:
        done = await process.run(argv, timeout=10, merge_stderr=True)
    except process.ProcessTimeout:
        raise NetworkError(f"{' '.join(argv)} did not finish within 10s") from None
    if done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)} failed (exit {done.returncode}): {done.text().strip()}")


async def wire(c: Controller, block: AddressBlock, holder_pid: int) -> None:
    """The controller's veth: its address and a route to its cluster's block inside, the host's
    end outside."""
    host_link, host_addr = block.host_link(c.index), block.host_address(c.index)
    inside = ["nsenter", f"--net=/proc/{holder_pid}/ns/net", "--", "ip"]
    await _ip(
        "ip", "link", "add", host_link, "type", "veth", "peer", "name", PEER_LINK, "netns", str(holder_pid)
    )
    await _ip("ip", "addr", "add", f"{host_addr}/30", "dev", host_link)
    await _ip("ip", "link", "set", host_link, "up")
    await _ip(*inside, "addr", "add", f"{c.address}/30", "dev", PEER_LINK)
    await _ip(*inside, "link", "set", "lo", "up")
    await _ip(*inside, "link", "set", PEER_LINK, "up")
    # the rest of the block (the slurmds' address, the other controllers) through the host, and
    # nothing else: a controller reaches only addresses of this cluster
    await _ip(*inside, "route", "add", str(block.network), "via", host_addr)
    # the host passes packets between controllers (backups ping the primary) for our links only,
    # whatever the machine's own ip_forward says
    await _ip("sysctl", "-q", "-w", f"net.ipv4.conf.{host_link}.forwarding=1")


def listening(pid: int, port: int) -> bool:
    """Whether a TCP socket listens on `port` in the network namespace of process `pid`. A client
    asking a controller that does not listen yet retries its connection for seconds: `scontrol
    ping` then takes that long, so a start waits for this before anything asks."""
    listen = "0A"  # TCP_LISTEN in /proc/net/tcp
    try:
        lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[3] == listen and int(fields[1].rsplit(":", 1)[1], 16) == port:
            return True
    return False


def links_left(block: AddressBlock, count: int) -> list[str]:
    """The host ends of this block's veths that still exist."""
    return [block.host_link(i) for i in range(count) if Path("/sys/class/net", block.host_link(i)).exists()]


async def wait_links_gone(block: AddressBlock, count: int, timeout: float) -> list[str]:
    """Wait for the kernel to remove the veths once their namespaces died (it does so a moment
    later, from a work queue); returns those still there at the deadline."""
    deadline = time.monotonic() + timeout
    while (left := links_left(block, count)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return left
