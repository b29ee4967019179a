"""The slurm.conf (and gres.conf, cgroup.conf) of a dev cluster: one controller, N slurmd on one host."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sidecars.devcluster import slurmdbd


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    nodes: int = 3
    gpus: int = 0  # fake GPUs per node (GRES gpu with device files that nothing opens)
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

    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.nodes + 1)]


@dataclass(frozen=True, slots=True)
class Ports:
    slurmctld: int
    slurmd: int  # SlurmdPort: used by dynamic (-Z) nodes
    nodes: Mapping[str, int]
    slurmdbd: int = 0  # DbdPort; 0 without accounting


def render(spec: ClusterSpec, d: Path, ports: Ports, host: str, cluster_name: str) -> dict[str, str]:
    """File name -> content, for DIR/etc. The shapes differ only in how daemons authenticate, how
    nodes are known (static NodeName lines, or dynamic nodes in NodeSets: slinky.py) and the room
    left for dynamic nodes; everything else is one block, the same for both."""
    slinky = spec.shape == "slinky"
    if slinky:
        auth = ["AuthType=auth/slurm", "CredType=cred/slurm", "SlurmctldParameters=enable_configless"]
    else:
        auth = ["AuthType=auth/munge", f"AuthInfo=socket={d}/munge/munge.sock", "CredType=cred/munge"]
    lines = [
        f"ClusterName={cluster_name}",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ports.slurmctld}",
        f"SlurmdPort={ports.slurmd}",
        *auth,
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={d}/state",
        f"SlurmdSpoolDir={d}/spool/%n",
        f"SlurmctldPidFile={d}/run/slurmctld.pid",
        f"SlurmdPidFile={d}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={d}/log/slurmctld.log",
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
        "SlurmctldTimeout=30",
        f"SlurmdTimeout={spec.slurmd_timeout}",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=60",
        "CommunicationParameters=NoInAddrAny",
    ]
    # Slinky's workers register themselves: room for every one that may, as Slinky's chart sets it
    room = max(spec.max_node_count, spec.nodes + 8) if slinky else spec.max_node_count
    if room:
        lines += [f"MaxNodeCount={room}", "TreeWidth=65533"]
    if spec.gpus:
        lines.append("GresTypes=gpu")
    if slinky:
        nodesets = sorted({spec.nodeset, *spec.nodesets.values()})
        lines += [f"NodeSet={ns} Feature={ns}" for ns in nodesets]
        members = ",".join(nodesets)
    else:
        gres = f" Gres=gpu:{spec.gpus}" if spec.gpus else ""
        for name, port in ports.nodes.items():
            feat = f" Feature={spec.features[name]}" if name in spec.features else ""
            lines.append(
                f"NodeName={name} NodeAddr=127.0.0.1 NodeHostname={host} Port={port} CPUs={spec.cpus} "
                f"RealMemory={spec.memory}{gres}{feat} State=UNKNOWN"
            )
        members = "ALL"
    lines.append(
        f"PartitionName=debug Nodes={members} Default=YES MaxTime={spec.partition_max_time} State=UP"
    )
    if spec.extra_conf:
        lines.append(spec.extra_conf.strip())
    files = {"slurm.conf": "\n".join(lines) + "\n"}
    if slinky:
        files["cgroup.conf"] = "CgroupPlugin=disabled\n"
    if spec.gpus:
        files["gres.conf"] = f"Name=gpu File={d}/dev/nvidia[0-{spec.gpus - 1}]\n"
    return files
