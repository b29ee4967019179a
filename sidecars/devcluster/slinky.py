"""The Slinky shape of a dev cluster: what Slinky's slurm-operator deploys, on one machine.

- slurmctld serves the configuration (`SlurmctldParameters=enable_configless`); workers have no
  slurm.conf and start as `slurmd -Z --conf-server HOST:PORT --conf "Features=<nodeset> ..."`,
  registering themselves as dynamic nodes (`MaxNodeCount` leaves room for them);
- partitions select workers through `NodeSet=<name> Feature=<name>`;
- `AuthType=auth/slurm` and `CredType=cred/slurm` with one generated `slurm.key`, no munge: the key
  sits next to slurm.conf, where slurmctld finds it, as Slinky's slurmctld pod mounts it; configless
  workers are pointed at it with `SLURM_SACK_KEY`. Clients (our shims) never read it: 24.11 and 26.05
  get their tokens from a local daemon's sack socket in the namespace's /run (a slurmd's
  /run/slurm/sack.socket, else slurmctld's /run/slurmctld/sack.socket), as a login pod's sackd serves.

slurmconf.render writes this shape's slurm.conf beside the classic one; this module holds the rest.

Several dynamic slurmd share this host, so each needs its own port. `--conf` is documented to
take no `Port=`, but 24.11 and 26.05 accept one (measured: slurmd binds it and slurmctld records
it as the node's Port, reached through the address the node registered from). That is simpler
than a network namespace per node (a bridge, veths, clients through `nsenter --net`), keeps every
port reachable from the host (probes, `/livez`), and needs no privileges beyond the PID namespace.
22.05 has neither auth/slurm nor a per-node port for `-Z` nodes: the shape needs 23.11 or later.
"""

from __future__ import annotations

import os
from pathlib import Path

from sidecars.devcluster.slurmconf import ClusterSpec, Ports

SHAPES = ("classic", "slinky")
KEY_FILE = "slurm.key"
MIN_RELEASE = (23, 11)


def check(spec: ClusterSpec, version: str) -> str | None:
    """Why this spec cannot run on `version` (None: it can)."""
    if spec.shape not in SHAPES:
        return f"unknown cluster shape {spec.shape!r} (one of: {', '.join(SHAPES)})"
    if spec.shape != "slinky":
        return None
    major, minor = (int(x) for x in version.split(".")[:2])
    if (major, minor) < MIN_RELEASE:
        need = ".".join(str(x) for x in MIN_RELEASE)
        return f"the Slinky shape needs Slurm {need} or later (auth/slurm); this is {version}"
    return None


def nodeset_of(spec: ClusterSpec, name: str) -> str:
    return spec.nodesets.get(name, spec.nodeset)


def write_key(etc: Path) -> Path:
    """A fresh auth/slurm key (auth/slurm refuses one readable by others or too short)."""
    key = etc / KEY_FILE
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    return key


def node_conf(spec: ClusterSpec, name: str, port: int) -> str:
    """The worker's `--conf`: what a Slinky NodeSet pod passes (Features, resources), plus its port."""
    features = [nodeset_of(spec, name), *[f for f in spec.features.get(name, "").split(",") if f]]
    words = [f"Features={','.join(features)}", f"CPUs={spec.cpus}"]
    if spec.memory:  # none: the worker registers the memory it has, as when Slinky's pod gives none
        words.append(f"RealMemory={spec.memory}")
    if spec.gpus:
        words.append(f"Gres={spec.gres()}")
    if name in spec.topology:
        words.append(f"Topology={spec.topology[name]}")
    words.append(f"Port={port}")
    return " ".join(words)


def slurmd_args(
    spec: ClusterSpec, d: Path, ports: Ports, name: str, port: int, controllers: list[str] | None = None
) -> list[str]:
    """`env` words and the slurmd command line of one configless worker (inside the namespace).
    `controllers`: the controllers' addresses, when several (as Slinky gives a worker every one)."""
    servers = ",".join(f"{a}:{ports.slurmctld}" for a in controllers or ["127.0.0.1"])
    return [
        "env",
        "-u",
        "SLURM_CONF",  # configless: the configuration comes from slurmctld
        f"SLURM_SACK_KEY={d / 'etc' / KEY_FILE}",
        "slurmd",
        "-Z",
        "-N",
        name,
        "--conf-server",
        servers,
        "--conf",
        node_conf(spec, name, port),
    ]
