"""The slurm.conf (and gres.conf, cgroup.conf) of a dev cluster: one controller, N slurmd on one host."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sidecars.devcluster import slurmdbd
from sidecars.devcluster.netblocks import AddressBlock

JWT_KEY = "jwt_hs256.key"  # with ClusterSpec(jwt=True): the HS256 key in DIR/etc slurmctld signs tokens with

# what a node record with no slurmd can be configured as (slurm.conf's State=); a record is a node of
# a large cluster that is not up now: not provisioned (DOWN), not yet existing (FUTURE, which Slurm's
# node listings leave out) or a cloud node that is powered down (CLOUD)
RECORD_STATES = ("DOWN", "DRAIN", "FUTURE", "CLOUD")
RECORD_PREFIX = "x"
RECORD_REASON = "not_provisioned"
# how slurmctld's messages to the records end (ClusterSpec.record_reach). slurmctld messages every
# record that never registered at each ping round (REQUEST_NODE_REGISTRATION_STATUS, from a few
# seconds after its start), and retries a refused connection once a second for up to MessageTimeout,
# at most 10 s (`slurm_send_addr_recv_msgs`); no other error of connect() is retried:
# - "unreachable" (the default): the limited broadcast address, to which the kernel refuses a TCP
#   connect at once (ENETUNREACH). Each message ends within a millisecond, as it does when a slurmd
#   answers: what a fleet whose slurmds run costs slurmctld's agent threads;
# - "refused": a loopback port nobody listens on. Each message holds an agent thread for 10 s; on
#   24.11+ a reconfigure in that window first waits up to 3 s for them (`agent_fini`)
RECORD_REACHES = {"unreachable": "255.255.255.255", "refused": "127.0.0.1"}


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    nodes: int = 3
    gpus: int = 0  # fake GPUs per node (GRES gpu with device files that nothing opens)
    gpu_type: str = ""  # their GRES type (`gpu:h100:2`, gres.conf's `Type=h100`); none when empty
    cpus: int = 1
    memory: int = 1000
    features: Mapping[str, str] = field(default_factory=dict)  # node -> "a,b"
    # slinky shape: node -> its `--conf Topology=` at registration (25.05+; none when absent)
    topology: Mapping[str, str] = field(default_factory=dict)
    extra_conf: str = ""  # appended to slurm.conf (a later duplicate key wins)
    files: Mapping[str, str] = field(default_factory=dict)  # more files for etc/ (topology.yaml, ...)
    slurmd_timeout: int = 30
    max_node_count: int = 0  # > 0: room for dynamic nodes
    partition_max_time: str = "INFINITE"
    # run slurmctld as our images do (`slurmctld -D`, a child the cluster holds) instead of daemonized
    foreground_ctld: bool = False
    # "classic" (static NodeName lines, munge) or "slinky" (configless, dynamic nodes, auth/slurm:
    # see slinky.py); with "slinky" every node is in `nodeset` unless `nodesets` (node -> name) says
    shape: str = "classic"
    nodeset: str = "slinky"
    nodesets: Mapping[str, str] = field(default_factory=dict)
    # job records kept by a slurmdbd on a MariaDB of the cluster's own (mariadb.py, slurmdbd.py);
    # classic shape only; adds seconds to the start (the database, then slurmdbd's tables)
    accounting: bool = False
    # the scale shape: node records without a slurmd, as a large cluster has them. State -> how many,
    # named x0001, x0002, ... in this order, in a partition of their own (`records`, not the default)
    # so that no job of a test is ever placed on one; nothing waits for them to come up
    node_records: Mapping[str, int] = field(default_factory=dict)
    record_cpus: int = 64
    record_memory_mb: int = 512000  # RealMemory, in MB
    record_reach: str = "unreachable"  # how messages to the records fail: one of RECORD_REACHES
    max_job_count: int = 0  # > 0: MaxJobCount (Slurm's default is 10,000 jobs, held ones included)

    # more than 1: highly available, as Slinky runs it (`SlurmctldHost` once per controller, one
    # StateSaveLocation): each controller in a network namespace of its own (controllers.py)
    controllers: int = 1
    # how long a backup waits for a silent primary before it takes control
    slurmctld_timeout_seconds: int = 30
    # with several controllers: each reads a configuration directory of its own (DIR/<name>/etc,
    # a copy of DIR/etc at start), as each controller pod of Slinky's mounts its own /etc/slurm
    conf_per_controller: bool = False
    # tokens (AuthAltTypes=auth/jwt) beside munge, with a key in DIR/etc/jwt_hs256.key (JWT_KEY): what
    # slurmrestd and `scontrol token` need (restd.py); the key is made per cluster, never shipped
    jwt: bool = False
    # 25.11+, with jwt: slurmctld's HTTP endpoints check tokens with that key too
    # (`SlurmctldHttpAuthParameters`: without it 26.05 answers every token 401)
    http_auth: bool = False

    def __post_init__(self) -> None:
        for state, count in self.node_records.items():
            if state not in RECORD_STATES:
                raise ValueError(f"node record state {state!r} is not one of {', '.join(RECORD_STATES)}")
            if count < 0:
                raise ValueError(f"node record count for {state} is negative: {count}")
        if self.record_reach not in RECORD_REACHES:
            raise ValueError(
                f"node record reach {self.record_reach!r} is not one of {', '.join(RECORD_REACHES)}"
            )

    def gres(self) -> str:
        """Each node's GRES as slurm.conf (or a worker's `--conf`) writes it: `gpu:2`, `gpu:h100:2`."""
        return ":".join(["gpu", *([self.gpu_type] if self.gpu_type else []), str(self.gpus)])

    def node_names(self) -> list[str]:
        """The nodes that run a slurmd."""
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    def record_blocks(self) -> list[tuple[str, list[str]]]:
        """(state, names) of each block of node records, in the order `node_records` gives them."""
        total = sum(self.node_records.values())
        width = max(4, len(str(total)))
        blocks: list[tuple[str, list[str]]] = []
        first = 1
        for state, count in self.node_records.items():
            names = [f"{RECORD_PREFIX}{i:0{width}d}" for i in range(first, first + count)]
            if names:
                blocks.append((state, names))
            first += count
        return blocks

    def record_names(self) -> list[str]:
        return [name for _, names in self.record_blocks() for name in names]

    def controller_names(self) -> list[str]:
        """The controllers' host names, primary first (`SlurmctldHost` order)."""
        return [f"ctld-{chr(ord('a') + i)}" for i in range(self.controllers)]


@dataclass(frozen=True, slots=True)
class Ports:
    slurmctld: int
    slurmd: int  # SlurmdPort: used by dynamic (-Z) nodes
    nodes: Mapping[str, int]
    slurmdbd: int = 0  # DbdPort; 0 without accounting


def render(
    spec: ClusterSpec,
    d: Path,
    ports: Ports,
    host: str,
    cluster_name: str,
    block: AddressBlock | None = None,
) -> dict[str, str]:
    """File name -> content, for DIR/etc. The shapes differ only in how daemons authenticate, how
    nodes are known (static NodeName lines, or dynamic nodes in NodeSets: slinky.py) and the room
    left for dynamic nodes; everything else is one block, the same for both.

    With several controllers (`block` then holds their addresses) every controller reads this one
    file, as Slurm requires; each finds its pid and log file in DIR/ctld, which its own mount
    namespace maps to DIR/<its name> (two controllers sharing one pid file would kill each other)."""
    slinky = spec.shape == "slinky"
    if spec.controllers > 1:
        if block is None:
            raise ValueError("several controllers need an address block")
        ctld_hosts = [
            f"SlurmctldHost={name}({block.controller_address(i)})"
            for i, name in enumerate(spec.controller_names())
        ]
        ctld_dir, ctld_log_dir = d / "ctld", d / "ctld"
        node_addr = block.node_address
        # a slurmd binds the address its host name resolves to (127.0.0.1 here) under NoInAddrAny,
        # out of the controllers' reach: here it binds every address, its leased port its own
        bind = []
    else:
        ctld_hosts = [f"SlurmctldHost={host}(127.0.0.1)"]
        ctld_dir, ctld_log_dir = d / "run", d / "log"
        node_addr = "127.0.0.1"
        bind = ["CommunicationParameters=NoInAddrAny"]
    if slinky:
        auth = ["AuthType=auth/slurm", "CredType=cred/slurm", "SlurmctldParameters=enable_configless"]
    else:
        auth = ["AuthType=auth/munge", f"AuthInfo=socket={d}/munge/munge.sock", "CredType=cred/munge"]
    lines = [
        f"ClusterName={cluster_name}",
        *ctld_hosts,
        f"SlurmctldPort={ports.slurmctld}",
        f"SlurmdPort={ports.slurmd}",
        *auth,
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={d}/state",
        f"SlurmdSpoolDir={d}/spool/%n",
        f"SlurmctldPidFile={ctld_dir}/slurmctld.pid",
        f"SlurmdPidFile={d}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={ctld_log_dir}/slurmctld.log",
        f"SlurmdLogFile={d}/log/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "MailProg=/bin/true",
        # no cgroups here: linuxproc tracks job processes through /proc of the cluster's PID namespace
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        *(
            slurmdbd.slurm_conf_lines(d, ports.slurmdbd)
            if spec.accounting
            else ["AccountingStorageType=accounting_storage/none"]
        ),
        "JobCompType=jobcomp/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/backfill",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        f"SlurmctldTimeout={spec.slurmctld_timeout_seconds}",
        f"SlurmdTimeout={spec.slurmd_timeout}",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=60",
        *bind,
    ]
    # Slinky's workers register themselves: room for every one that may, as Slinky's chart sets it
    room = max(spec.max_node_count, spec.nodes + 8) if slinky else spec.max_node_count
    if room:  # the node table holds the records too: slurmctld dies when they do not fit
        lines += [f"MaxNodeCount={room + len(spec.record_names())}", "TreeWidth=65533"]
    if spec.max_job_count:
        lines.append(f"MaxJobCount={spec.max_job_count}")
    if spec.gpus:
        lines.append("GresTypes=gpu")
    if slinky:
        nodesets = sorted({spec.nodeset, *spec.nodesets.values()})
        lines += [f"NodeSet={ns} Feature={ns}" for ns in nodesets]
        members = ",".join(nodesets)
    else:
        gres = f" Gres={spec.gres()}" if spec.gpus else ""
        for name, port in ports.nodes.items():
            feat = f" Feature={spec.features[name]}" if name in spec.features else ""
            lines.append(
                f"NodeName={name} NodeAddr={node_addr} NodeHostname={host} Port={port} CPUs={spec.cpus} "
                f"RealMemory={spec.memory}{gres}{feat} State=UNKNOWN"
            )
        members = ",".join(ports.nodes) if spec.node_records else "ALL"
    lines += _record_lines(spec)
    lines.append(
        f"PartitionName=debug Nodes={members} Default=YES MaxTime={spec.partition_max_time} State=UP"
    )
    if spec.node_records:
        lines.append(f"PartitionName=records Nodes={_span(spec.record_names())} Default=NO State=UP")
    if spec.jwt:
        key = f"jwt_key={d}/etc/{JWT_KEY}"
        lines += ["AuthAltTypes=auth/jwt", f"AuthAltParameters={key}"]
        if spec.http_auth:  # 25.11+ only: older releases refuse the key
            lines.append(f"SlurmctldHttpAuthParameters={key}")
    if spec.extra_conf:
        lines.append(spec.extra_conf.strip())
    files = {"slurm.conf": "\n".join(lines) + "\n"}
    if spec.jwt:
        files[JWT_KEY] = secrets.token_hex(32)
    if slinky:
        files["cgroup.conf"] = "CgroupPlugin=disabled\n"
    if spec.gpus:
        typed = f" Type={spec.gpu_type}" if spec.gpu_type else ""
        files["gres.conf"] = f"Name=gpu{typed} File={d}/dev/nvidia[0-{spec.gpus - 1}]\n"
    return files


def _span(names: list[str]) -> str:
    """x0001..x0100 as `x[0001-0100]`: the records are numbered without gaps."""
    if len(names) == 1:
        return names[0]
    first, last = names[0], names[-1]
    p = len(RECORD_PREFIX)
    return f"{RECORD_PREFIX}[{first[p:]}-{last[p:]}]"


def _record_lines(spec: ClusterSpec) -> list[str]:
    """One NodeName line per block of records, at an address where no slurmd listens (RECORD_REACHES
    says how slurmctld's messages to them end)."""
    lines = []
    addr = RECORD_REACHES[spec.record_reach]
    for state, names in spec.record_blocks():
        reason = f" Reason={RECORD_REASON}" if state in ("DOWN", "DRAIN") else ""
        lines.append(
            f"NodeName={_span(names)} NodeAddr={addr} CPUs={spec.record_cpus} "
            f"RealMemory={spec.record_memory_mb} State={state}{reason}"
        )
    return lines
