"""The control plane's settings: flags (each also from `SIDECARS_*`) into one frozen dataclass."""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import ssl
from typing import Any

from sidecars.controlplane.flag_kinds import (
    ANNOTATION_KEY,
    AUDIENCE_NAME,
    BUDGET,
    CONFIGMAP,
    IMAGE,
    JOB_READ,
    KUBERNETES,
    OBJECT_NAME,
    SIGNALS,
    SLINKY_MODE,
    TAINT_KEYS,
    WORKLOAD,
)
from sidecars.kube import topology
from sidecars.kube.nodename import ANNOTATION, SOURCES
from sidecars.runtime import http
from sidecars.runtime.looplag import LoopLagSettings
from sidecars.runtime.settings import (
    ADDRESS,
    BOOL,
    TOKEN_FILE,
    URL,
    ConfigError,
    add_flags,
    choice,
    declared,
    number,
    seconds,
    setting,
    settings_of,
    values,
)
from sidecars.slurm import daemons

AUDIENCE = "slurm-sidecars"  # the audience of the agents' projected ServiceAccount tokens


# The kinds of setting the writers' groups share, each stated once.


def _switch(default: bool, help: str, *, flag: str = "") -> Any:
    """On or off."""
    return setting(default=default, flag=flag, conv=BOOL, help=help)


def _hold(default: float, help: str) -> Any:
    """How long a state must hold before it is acted on (0: at once)."""
    return setting(default=default, conv=seconds(zero_ok=True), help=help)


def _rate(default: float, what: str) -> Any:
    """A cap on Kubernetes writes a second (a token bucket's rate)."""
    return setting(default=default, conv=number(float, unit="/s"), help=f"at most this many {what} a second")


def _fraction(default: float, what: str) -> Any:
    """A cap on the workers out at once, as a share of them (at least one)."""
    return setting(
        default=default,
        conv=number(float, most=1),
        help=f"at most max(1, this fraction of the workers) {what}",
    )


# The writers' settings, a group each: the writer is handed its group, not the whole settings.
# Each group's fields are flags under its prefix (`recycle.grace_seconds`: --recycle-grace-seconds).


@declared()
class RecycleSettings:
    """Pods whose worker Slurm does not know are deleted (recreated by their controller), capped."""

    grace_seconds: float = _hold(300.0, "a Ready worker absent from Slurm this long is recycled")
    window_seconds: float = setting(default=600.0, conv=seconds(), help="the window of the recycling cap")
    fraction: float = _fraction(0.10, "recycled per window")
    backoff_seconds: float = setting(
        default=60.0, conv=seconds(), help="first wait before recycling the same pod again"
    )
    backoff_max_seconds: float = setting(
        default=3600.0, conv=seconds(), help="longest wait between recycles of a pod"
    )


@declared()
class RecordSettings:
    """Dynamic nodes' records of pods that are gone are deleted."""

    cleanup: bool = _switch(
        True,
        "delete the record of a dynamic Slurm node whose worker pod is gone, and drain (then remake) "
        "one registered with fewer GPUs than its pod's nvidia.com/gpu limit",
    )
    grace_seconds: float = _hold(
        600.0,
        "a dynamic node held by no worker pod this long, with no job holding or naming it, loses its record",
    )
    deletes_per_pass: int = setting(
        default=2, conv=number(unit="records"), help="at most this many node records deleted a pass"
    )
    stale_seconds: float = 60.0  # not a flag: a snapshot older than this is no ground for a delete


@declared()
class UnownedSettings:
    """Slurm's own drains of a worker's node: given back, or the pod recycled (capped as recycling)."""

    drain_policy: bool = _switch(
        False,
        "give back a worker's node that Slurm drained or downed itself (prolog, kill task failed, not "
        "responding, ...) once healthy, or recycle its pod when not; capped like recycling (off: only "
        "reported; an admin's or another tool's reason is never touched)",
    )
    settle_seconds: float = _hold(
        300.0, "how long Slurm's own drain must hold before --unowned-drain-policy acts on it"
    )


@declared()
class CordonSettings:
    sync: bool = _switch(
        True, "a cordoned Kubernetes Node drains its workers' Slurm nodes; uncordon undrains them"
    )
    taints: tuple[str, ...] = setting(
        default=(),
        conv=TAINT_KEYS,
        help="comma-separated taint keys that count as a cordon when NoSchedule or NoExecute",
    )


@declared()
class HealthSettings:
    """Node conditions and taints that drain the workers on the Node."""

    conditions: tuple[tuple[str, str], ...] = setting(
        default=(),
        conv=SIGNALS,
        help="Node conditions that drain the workers on the Node: TYPE[=STATUS] (STATUS True unless "
        "given), e.g. KernelDeadlock,ReadonlyFilesystem (node-problem-detector), GpuXidError (NVSentinel)",
    )
    taints: tuple[tuple[str, str], ...] = setting(
        default=(),
        conv=SIGNALS,
        help="taints (NoSchedule or NoExecute) that drain the workers on the Node: KEY[=VALUE] (any value "
        "unless given)",
    )
    settle_seconds: float = _hold(
        30.0, "a health signal must hold this long before its drain, and be gone this long before the undrain"
    )
    max_fraction: float = _fraction(0.10, "held out by health signals at once; the rest wait")


@declared()
class ConditionSettings:
    """The worker pods' SlurmNode* conditions."""

    enabled: bool = _switch(
        True,
        "worker pods carry SlurmNodeReady/SlurmNodeDrained/SlurmNodeDown conditions",
        flag="--pod-conditions",
    )
    qps: float = _rate(5.0, "pod status patches")
    settle_seconds: float = _hold(
        10.0, "a Slurm state must hold this long before the pod conditions show it (no flapping)"
    )


@declared()
class GpuSettings:
    """NVLink domains as Slurm node features."""

    domain_features: bool = _switch(
        True, "a worker's Slurm node gets nvlink-clique-<v> from its Node's nvidia.com/gpu.clique label"
    )
    compute_domains: bool = _switch(  # also watch NVIDIA's DRA ComputeDomains (the CRD and RBAC needed)
        False,
        "also nvlink-domain-<name> for each resource.nvidia.com ComputeDomain its Node joined",
        flag="--compute-domains",
    )


@declared()
class BusySettings:
    """The busy label on worker pods running jobs."""

    label: bool = _switch(
        True, "worker pods running jobs carry slurm-sidecars.io/busy=true (a PDB protects them)"
    )
    label_qps: float = _rate(10.0, "busy-label patches")
    release_seconds: float = _hold(
        30.0, "a worker idle this long loses its busy label (back-to-back jobs keep it)"
    )


@declared()
class TopologySettings:
    """Slurm's topology from Node labels."""

    configmap: str = setting(
        default="",
        conv=CONFIGMAP,
        help="ConfigMap to write the rendered topology.yaml (25.05+) / topology.conf to, for config-sync",
    )
    settle_seconds: float = _hold(
        10.0, "a new place from the labels must hold this long before the node is moved (no flapping)"
    )
    # from the --topology-* label flags (sidecars.kube.topology); None = no topology sync
    spec: topology.TopologySpec | None = None


@declared()
class ClusterUpgradeSettings:
    """A whole-cluster upgrade in Kubernetes (docs/upgrades.md): what it changes, named."""

    slurmdbd_workload: tuple[str, str] | None = setting(
        default=None,
        conv=WORKLOAD,
        help="slurmdbd's workload a whole-cluster upgrade moves: deployment/NAME or statefulset/NAME",
    )
    slurmdbd_container: str = setting(
        default=daemons.SLURMDBD, conv=OBJECT_NAME, help="the slurmdbd container in that workload"
    )
    slurmctld_statefulset: str = setting(
        default="", conv=OBJECT_NAME, help="slurmctld's StatefulSet a whole-cluster upgrade moves"
    )
    slurmctld_container: str = setting(
        default=daemons.SLURMCTLD, conv=OBJECT_NAME, help="the slurmctld container in that StatefulSet"
    )
    state_image: str = setting(
        default="",
        conv=IMAGE,
        help="this project's image, for the Jobs that copy and restore slurmctld's StateSaveLocation",
    )
    backup_job_configmap: str = setting(
        default="",
        conv=CONFIGMAP,
        help="ConfigMap whose job.yaml is the Job backing up the accounting database before slurmdbd moves",
    )
    without_database_backup: bool = _switch(
        False, "move slurmdbd with no database backup first (only where the platform keeps its own)"
    )
    rollout_timeout_seconds: float = setting(
        default=600.0,
        conv=seconds(),
        help="bound on each rollout of slurmdbd or slurmctld, and on their answer",
    )
    job_timeout_seconds: float = setting(
        default=3600.0,
        conv=seconds(),
        help="bound on each backup or state Job (one that outlives it is deleted)",
    )
    worker_budget: str = setting(
        default="1", conv=BUDGET, help="workers a whole-cluster upgrade's roll takes out of service at once"
    )


@declared()
class ReadSettings:
    """How often the fleet is read from Slurm, and how."""

    interval_seconds: float = setting(  # a read costs slurmctld 4 RPCs: 1 RPC/s
        default=4.0, conv=seconds(), help="how often to read the fleet from Slurm"
    )
    fast_interval_seconds: float = setting(
        default=0.25, conv=seconds(), help="read interval while a drain is in progress"
    )
    # one RPC each (`scontrol show config`); on releases before 23.11, which reconfigure in place with
    # the same BOOT_TIME, `sdiag`'s count of reconfigure requests too (fleet/reconfigures.py)
    reconfigure_poll_seconds: float = _hold(
        1.0,
        "ask slurmctld's start time this often: a new one (a reconfigure, a restart) reads the "
        "fleet at once, and the writers put back the node state it lost; 0: only at the next read",
    )
    brief_jobs: bool = setting(  # jobs read with squeue's brief format, not Slurm's JSON
        default=True,
        flag="--job-read",
        conv=JOB_READ,
        help="brief: squeue with a fixed format (small at any size); full: Slurm's job JSON (one RPC fewer)",
    )


@declared()
class LeaseSettings:
    """Leader election: the replica holding the Lease writes; the others follow."""

    name: str = setting(default="slurm-sidecars-control-plane", help="Lease for leader election")
    duration_seconds: float = setting(
        default=15.0, flag="--lease-seconds", conv=seconds(), help="lease duration"
    )
    renew_seconds: float = setting(  # retried every second after a failure, until the step-down deadline
        flag="--renew-seconds",
        default=7.0,
        conv=seconds(),
        help="how often the leader renews the lease (a failed renewal is retried every second)",
    )


@declared()
class ControlPlaneSettings:
    http_address: tuple[str, int] = setting(
        flag="--http", conv=ADDRESS, required=True, help="HOST:PORT to serve the API, probes and metrics on"
    )
    token: str = setting(  # the operator's credential: every call, writes to any node, maintenance, upgrades
        flag="--token-file",
        conv=TOKEN_FILE,
        required=True,
        help="file holding the operator's bearer token (maintenance, upgrades, drains of any node)",
    )
    reads: ReadSettings = settings_of(default_factory=ReadSettings)
    batch_window_seconds: float = _hold(
        0.1, "drain/undrain requests within this window become one scontrol call"
    )
    max_wait_seconds: float = setting(default=60.0, conv=seconds(), help="cap on the wait= of a long poll")
    namespace: str = setting(  # given, else $POD_NAMESPACE, else this
        default="slurm",
        help="namespace of the worker pods and of the Lease (default: $POD_NAMESPACE, else slurm)",
    )
    worker_selector: str = setting(
        default="app.kubernetes.io/component=worker", help="label selector of the worker (slurmd) pods"
    )
    node_label: str = setting(  # "" = the pod's spec.hostname, else its name
        default="",
        help="pod label naming the Slurm node (default: spec.hostname, else the pod name, as in Slinky)",
    )
    node_name_from: str = setting(
        default="pod",
        conv=choice(*SOURCES),
        help="pod: label, hostname or pod name (Slinky); kube-node: the Kubernetes Node's name (DaemonSet)",
    )
    node_name_annotation: str = setting(
        default=ANNOTATION,
        conv=ANNOTATION_KEY,
        help="with --node-name-from=kube-node: a Node annotation that gives its Slurm node name instead",
    )
    kubeconfig: str | None = setting(
        default=None, help="kubeconfig file (default: in-cluster, else $KUBECONFIG)"
    )
    kubernetes: bool = setting(  # False: never talk to Kubernetes, even when a config is found
        default=True, conv=KUBERNETES, help="off: never talk to Kubernetes"
    )
    lease: LeaseSettings = settings_of(default_factory=LeaseSettings, prefix="lease")
    identity: str = setting(default="", help="this replica's name in the Lease (default: pod name)")
    pod_name: str = setting(default="", help="this pod, for Events (default: $POD_NAME)")
    deletion_cost_qps: float = _rate(5.0, "deletion-cost patches")
    slinky_mode: bool | None = setting(  # None: auto, by each worker pod's controller owner
        default=None,
        conv=SLINKY_MODE,
        help="write the scale-in rank as Slinky's nodeset.slinky.slurm.net/pod-deletion-cost and "
        "pod-deadline, not controller.kubernetes.io/pod-deletion-cost, and leave those pods' cordons and "
        "conditions to the operator (auto, the default: on the pods a slinky.slurm.net NodeSet owns)",
    )
    recycle: RecycleSettings = settings_of(default_factory=RecycleSettings, prefix="recycle")
    records: RecordSettings = settings_of(default_factory=RecordSettings, prefix="record")
    unowned: UnownedSettings = settings_of(default_factory=UnownedSettings, prefix="unowned")
    viewer_token: str | None = setting(  # the read-only credential (web page, GETs)
        default=None,
        flag="--viewer-token-file",
        conv=TOKEN_FILE,
        required=True,
        help="file holding the read-only token: the web page at /ui/ and GETs under /v1/ (required)",
    )
    agent_audience: str = setting(  # agents' ServiceAccount tokens must hold it; "": no agent tokens
        default=AUDIENCE,
        conv=AUDIENCE_NAME,
        help="audience of the worker agents' projected ServiceAccount tokens, checked by TokenReview "
        '("" accepts none)',
    )
    http_limits: http.ServerLimits = settings_of(default_factory=http.ServerLimits, prefix="http")
    loop_lag: LoopLagSettings = settings_of(default_factory=LoopLagSettings)
    tls: ssl.SSLContext | None = None  # None: plain HTTP; --tls-cert-file, --tls-key-file
    config_sync: str | None = setting(
        default=None,
        conv=URL,
        help="config-sync's URL (e.g. http://127.0.0.1:9100), read for the web page's config history",
    )
    cordons: CordonSettings = settings_of(default_factory=CordonSettings, prefix="cordon")
    health: HealthSettings = settings_of(default_factory=HealthSettings, prefix="health")
    conditions: ConditionSettings = settings_of(default_factory=ConditionSettings, prefix="condition")
    gpu: GpuSettings = settings_of(default_factory=GpuSettings, prefix="gpu")
    leader_label: bool = _switch(
        False,
        "the Lease holder's pod carries slurm-sidecars.io/control-plane=leader, no other pod does "
        "(a Service for the agents selects it: one control plane per controller pod)",
    )
    busy: BusySettings = settings_of(default_factory=BusySettings, prefix="busy")
    topology: TopologySettings = settings_of(default_factory=TopologySettings, prefix="topology")
    upgrade: ClusterUpgradeSettings = settings_of(default_factory=ClusterUpgradeSettings, prefix="upgrade")

    @property
    def host(self) -> str:
        return self.http_address[0]

    @property
    def port(self) -> int:
        return self.http_address[1]


def configure(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, ControlPlaneSettings)
    http.configure_tls(parser)
    topology.add_flags(parser)


def from_args(args: argparse.Namespace) -> ControlPlaneSettings:
    given = values(ControlPlaneSettings, args)
    if given["viewer_token"] == given["token"]:
        raise ConfigError("--viewer-token-file: must differ from --token-file (the operator's)")
    pod_name = given["pod_name"] = given.get("pod_name") or os.environ.get("POD_NAME", "")
    given["identity"] = given.get("identity") or pod_name or socket.gethostname()
    given["namespace"] = given.get("namespace") or os.environ.get("POD_NAMESPACE") or "slurm"
    given["kubeconfig"] = given.get("kubeconfig") or None
    given["topology"] = dataclasses.replace(given["topology"], spec=topology.from_args(args))
    settings = ControlPlaneSettings(tls=http.tls_from(args), **given)
    if settings.upgrade.backup_job_configmap and settings.upgrade.without_database_backup:
        raise ConfigError(
            "--upgrade-without-database-backup: a backup Job is named (--upgrade-backup-job-configmap): "
            "give one or the other"
        )
    # the leader steps down after 2/3 of the lease without a renewal
    if settings.lease.renew_seconds >= settings.lease.duration_seconds * 2 / 3:
        raise ConfigError("--renew-seconds must be shorter than 2/3 of --lease-seconds")
    return settings
