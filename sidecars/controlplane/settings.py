"""The control plane's settings: flags (each also from `SIDECARS_*`) into one frozen dataclass."""

from __future__ import annotations

import argparse
import os
import re
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

from sidecars.kube import topology
from sidecars.kube.nodename import ANNOTATION, SOURCES
from sidecars.runtime import http
from sidecars.runtime.settings import ConfigError, flag, http_url, parse_addr, positive, read_token

AUDIENCE = "slurm-sidecars"  # the audience of the agents' projected ServiceAccount tokens


@dataclass(frozen=True, slots=True)
class ControlPlaneSettings:
    host: str
    port: int
    token: str  # the operator's credential: every call, writes to any node, maintenance, upgrades
    interval_seconds: float = 4.0  # a read costs slurmctld 4 RPCs: 1 RPC/s
    fast_interval_seconds: float = 0.25  # while a drain we asked for is still in progress
    brief_jobs: bool = True  # jobs read with squeue's brief format, not Slurm's JSON
    batch_window_seconds: float = 0.1  # drain/undrain requests within this window become one call
    max_wait_seconds: float = 60.0  # cap on a long poll
    namespace: str = "slurm"
    worker_selector: str = "app.kubernetes.io/component=worker"
    node_label: str = ""  # a pod label naming its Slurm node; "" = the pod's spec.hostname, else its name
    node_name_from: str = "pod"  # "kube-node": DaemonSet workers, named after their Kubernetes Node
    node_name_annotation: str = ANNOTATION  # the Node annotation that overrides its name (kube-node)
    kubeconfig: str | None = None
    kubernetes: bool = True  # False: never talk to Kubernetes, even when a config is found
    lease_name: str = "slurm-sidecars-control-plane"
    lease_seconds: float = 15.0
    renew_seconds: float = 7.0  # retried every second after a failure, until the step-down deadline
    identity: str = ""
    pod_name: str = ""
    deletion_cost_qps: float = 5.0
    recycle_grace_seconds: float = 300.0
    recycle_window_seconds: float = 600.0
    recycle_fraction: float = 0.10
    recycle_backoff_seconds: float = 60.0
    recycle_backoff_max_seconds: float = 3600.0
    viewer_token: str | None = None  # the read-only credential (web page, GETs); None: no viewer
    agent_audience: str = AUDIENCE  # agents' ServiceAccount tokens must hold it; "": no agent tokens
    http_limits: http.ServerLimits = field(default_factory=http.ServerLimits)
    tls: ssl.SSLContext | None = None  # None: plain HTTP
    config_sync: str | None = None  # config-sync's URL, for the page's config history
    cordon_sync: bool = True  # a cordoned Kubernetes Node drains the Slurm nodes of its worker pods
    cordon_taints: tuple[str, ...] = ()  # taint keys (NoSchedule/NoExecute) that count as a cordon
    pod_conditions: bool = True  # mirror each worker's Slurm state in its pod's conditions
    condition_qps: float = 5.0
    condition_settle_seconds: float = 10.0  # a new Slurm state must hold this long before it is written
    gpu_domain_features: bool = True  # a worker's Slurm node gets a feature naming its NVLink domain
    compute_domains: bool = False  # also watch NVIDIA's DRA ComputeDomains (the CRD and RBAC needed)
    busy_label: bool = True  # worker pods running jobs carry slurm-sidecars.io/busy=true (for a PDB)
    busy_label_qps: float = 10.0
    busy_release_seconds: float = 30.0  # idle this long before the busy label is removed (no flapping)
    topology: topology.TopologySpec | None = None  # from Node labels; None = no topology sync
    topology_configmap: str = ""  # the ConfigMap the rendered topology file is written to; "" = none
    topology_settle_seconds: float = 10.0  # a new place must hold this long before it is applied


def configure(parser: argparse.ArgumentParser) -> None:
    flag(parser, "--http", required=True, help="HOST:PORT to serve the API, probes and metrics on")
    flag(
        parser,
        "--token-file",
        required=True,
        help="file holding the operator's bearer token (maintenance, upgrades, drains of any node)",
    )
    flag(
        parser,
        "--viewer-token-file",
        default=None,
        help="file holding the read-only token: the web page at /ui/ and GETs under /v1/ (required)",
    )
    flag(
        parser,
        "--agent-audience",
        default=AUDIENCE,
        help="audience of the worker agents' projected ServiceAccount tokens, checked by TokenReview "
        '("" accepts none)',
    )
    http.configure_limits(parser)
    http.configure_tls(parser)
    flag(
        parser,
        "--config-sync",
        default=None,
        help="config-sync's URL (e.g. http://127.0.0.1:9100), read for the web page's config history",
    )
    flag(parser, "--interval-seconds", default="4", help="how often to read the fleet from Slurm")
    flag(parser, "--fast-interval-seconds", default="0.25", help="read interval while a drain is in progress")
    flag(
        parser,
        "--job-read",
        default="brief",
        choices=["brief", "full"],
        help="brief: squeue with a fixed format (small at any size); full: Slurm's job JSON (one RPC fewer)",
    )
    flag(
        parser,
        "--batch-window-seconds",
        default="0.1",
        help="drain/undrain requests within this window become one scontrol call",
    )
    flag(parser, "--max-wait-seconds", default="60", help="cap on the wait= of a long poll")
    flag(
        parser,
        "--namespace",
        default=os.environ.get("POD_NAMESPACE", "slurm"),
        help="namespace of the worker pods and of the Lease",
    )
    flag(
        parser,
        "--worker-selector",
        default="app.kubernetes.io/component=worker",
        help="label selector of the worker (slurmd) pods",
    )
    flag(
        parser,
        "--node-label",
        default="",
        help="pod label naming the Slurm node (default: spec.hostname, else the pod name, as in Slinky)",
    )
    flag(
        parser,
        "--node-name-from",
        default="pod",
        choices=list(SOURCES),
        help="pod: label, hostname or pod name (Slinky); kube-node: the Kubernetes Node's name (DaemonSet)",
    )
    flag(
        parser,
        "--node-name-annotation",
        default=ANNOTATION,
        help="with --node-name-from=kube-node: a Node annotation that gives its Slurm node name instead",
    )
    flag(parser, "--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, else $KUBECONFIG)")
    flag(
        parser, "--kubernetes", default="auto", choices=["auto", "off"], help="off: never talk to Kubernetes"
    )
    flag(parser, "--lease-name", default="slurm-sidecars-control-plane", help="Lease for leader election")
    flag(parser, "--lease-seconds", default="15", help="lease duration")
    flag(
        parser,
        "--renew-seconds",
        default="7",
        help="how often the leader renews the lease (a failed renewal is retried every second)",
    )
    flag(parser, "--identity", default=None, help="this replica's name in the Lease (default: pod name)")
    flag(parser, "--pod-name", default=os.environ.get("POD_NAME", ""), help="this pod (for Events)")
    flag(parser, "--deletion-cost-qps", default="5", help="at most this many deletion-cost patches a second")
    flag(
        parser,
        "--recycle-grace-seconds",
        default="300",
        help="a Ready worker absent from Slurm this long is recycled",
    )
    flag(parser, "--recycle-window-seconds", default="600", help="the window of the recycling cap")
    flag(
        parser,
        "--recycle-fraction",
        default="0.1",
        help="at most max(1, this fraction of the workers) recycled per window",
    )
    flag(
        parser,
        "--recycle-backoff-seconds",
        default="60",
        help="first wait before recycling the same pod again",
    )
    flag(
        parser, "--recycle-backoff-max-seconds", default="3600", help="longest wait between recycles of a pod"
    )

    flag(
        parser,
        "--cordon-sync",
        default="on",
        choices=["on", "off"],
        help="on: a cordoned Kubernetes Node drains its workers' Slurm nodes; uncordon undrains them",
    )
    flag(
        parser,
        "--cordon-taints",
        default="",
        help="comma-separated taint keys that count as a cordon when NoSchedule or NoExecute",
    )
    flag(
        parser,
        "--pod-conditions",
        default="on",
        choices=["on", "off"],
        help="on: worker pods carry SlurmNodeReady/SlurmNodeDrained/SlurmNodeDown conditions",
    )
    flag(parser, "--condition-qps", default="5", help="at most this many pod status patches a second")
    flag(
        parser,
        "--condition-settle-seconds",
        default="10",
        help="a Slurm state must hold this long before the pod conditions show it (no flapping)",
    )
    flag(
        parser,
        "--busy-label",
        default="on",
        choices=["on", "off"],
        help="on: worker pods running jobs carry slurm-sidecars.io/busy=true (a PDB protects them)",
    )
    flag(parser, "--busy-label-qps", default="10", help="at most this many busy-label patches a second")
    flag(
        parser,
        "--busy-release-seconds",
        default="30",
        help="a worker idle this long loses its busy label (back-to-back jobs keep it)",
    )
    topology.add_flags(parser)
    flag(
        parser,
        "--topology-configmap",
        default="",
        help="ConfigMap to write the rendered topology.yaml (25.05+) / topology.conf to, for config-sync",
    )
    flag(
        parser,
        "--topology-settle-seconds",
        default="10",
        help="a new place from the labels must hold this long before the node is moved (no flapping)",
    )
    configure_gpu(parser)


def configure_gpu(parser: argparse.ArgumentParser) -> None:
    flag(
        parser,
        "--gpu-domain-features",
        default="on",
        choices=["on", "off"],
        help="on: a worker's Slurm node gets nvlink-clique-<v> from its Node's nvidia.com/gpu.clique label",
    )
    flag(
        parser,
        "--compute-domains",
        default="off",
        choices=["on", "off"],
        help="on: also nvlink-domain-<name> for each resource.nvidia.com ComputeDomain its Node joined",
    )


def _taint_keys(text: str) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    for key in keys:
        name = key.rpartition("/")[2]
        if not name or len(key) > 316 or any(c.isspace() or c in "=:," for c in key):
            raise ConfigError(f"--cordon-taints: not a taint key: {key!r}")
    return keys


def _source(text: str) -> str:
    if text not in SOURCES:
        raise ConfigError(f"--node-name-from: one of {', '.join(SOURCES)}, got {text!r}")
    return text


def _annotation_key(text: str) -> str:
    key = (text or "").strip()
    prefix, _, name = key.rpartition("/")
    if not name or len(name) > 63 or len(prefix) > 253 or any(c.isspace() or c in "=:," for c in key):
        raise ConfigError(f"--node-name-annotation: not an annotation key: {text!r}")
    return key


def _topology(args: argparse.Namespace) -> dict[str, Any]:
    configmap = args.topology_configmap or ""
    if configmap and not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", configmap):
        raise ConfigError(f"--topology-configmap: not a ConfigMap name: {configmap!r}")
    return {
        "topology": topology.from_args(args),
        "topology_configmap": configmap,
        "topology_settle_seconds": positive(
            args.topology_settle_seconds, "--topology-settle-seconds", allow_zero=True
        ),
    }


def from_args(args: argparse.Namespace) -> ControlPlaneSettings:
    host, port = parse_addr(args.http)
    fraction = positive(args.recycle_fraction, "--recycle-fraction")
    if fraction > 1:
        raise ConfigError(f"--recycle-fraction: must be <= 1, got {args.recycle_fraction!r}")
    lease = positive(args.lease_seconds, "--lease-seconds")
    renew = positive(args.renew_seconds, "--renew-seconds")
    if renew >= lease * 2 / 3:  # the leader steps down after 2/3 of the lease without a renewal
        raise ConfigError("--renew-seconds must be shorter than 2/3 of --lease-seconds")
    pod_name = args.pod_name or ""
    config_sync = http_url(args.config_sync, "--config-sync") if args.config_sync else None
    identity = args.identity or pod_name or socket.gethostname()
    token = read_token(args.token_file)
    viewer = read_token(args.viewer_token_file, "--viewer-token-file")
    if viewer == token:
        raise ConfigError("--viewer-token-file: must differ from --token-file (the operator's)")
    audience = str(args.agent_audience or "").strip()
    if len(audience) > 253 or any(c.isspace() for c in audience):
        raise ConfigError(f"--agent-audience: not an audience: {args.agent_audience!r}")
    return ControlPlaneSettings(
        host=host,
        port=port,
        token=token,
        viewer_token=viewer,
        agent_audience=audience,
        http_limits=http.limits_from(args),
        tls=http.tls_from(args),
        interval_seconds=positive(args.interval_seconds, "--interval-seconds"),
        fast_interval_seconds=positive(args.fast_interval_seconds, "--fast-interval-seconds"),
        brief_jobs=args.job_read != "full",
        batch_window_seconds=positive(args.batch_window_seconds, "--batch-window-seconds", allow_zero=True),
        max_wait_seconds=positive(args.max_wait_seconds, "--max-wait-seconds"),
        namespace=args.namespace,
        worker_selector=args.worker_selector,
        node_label=args.node_label,
        node_name_from=_source(args.node_name_from),
        node_name_annotation=_annotation_key(args.node_name_annotation),
        kubeconfig=args.kubeconfig or None,
        kubernetes=args.kubernetes != "off",
        lease_name=args.lease_name,
        lease_seconds=lease,
        renew_seconds=renew,
        identity=identity,
        pod_name=pod_name,
        deletion_cost_qps=positive(args.deletion_cost_qps, "--deletion-cost-qps"),
        recycle_grace_seconds=positive(
            args.recycle_grace_seconds, "--recycle-grace-seconds", allow_zero=True
        ),
        recycle_window_seconds=positive(args.recycle_window_seconds, "--recycle-window-seconds"),
        recycle_fraction=fraction,
        recycle_backoff_seconds=positive(args.recycle_backoff_seconds, "--recycle-backoff-seconds"),
        recycle_backoff_max_seconds=positive(
            args.recycle_backoff_max_seconds, "--recycle-backoff-max-seconds"
        ),
        config_sync=str(config_sync).rstrip("/") if config_sync else None,
        cordon_sync=args.cordon_sync != "off",
        cordon_taints=_taint_keys(args.cordon_taints or ""),
        pod_conditions=args.pod_conditions != "off",
        condition_qps=positive(args.condition_qps, "--condition-qps"),
        condition_settle_seconds=positive(
            args.condition_settle_seconds, "--condition-settle-seconds", allow_zero=True
        ),
        gpu_domain_features=args.gpu_domain_features != "off",
        compute_domains=args.compute_domains == "on",
        **_topology(args),
        busy_label=args.busy_label != "off",
        busy_label_qps=positive(args.busy_label_qps, "--busy-label-qps"),
        busy_release_seconds=positive(args.busy_release_seconds, "--busy-release-seconds", allow_zero=True),
    )
