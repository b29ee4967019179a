"""The worker agent's settings: flags (and `SIDECARS_*` environment) into one frozen dataclass."""

from __future__ import annotations

import argparse
import os
import shlex
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sidecars.kube import topology
from sidecars.kube.nodename import ANNOTATION, SOURCES, is_node_name
from sidecars.kube.topology import TopologySpec
from sidecars.runtime import http
from sidecars.runtime.settings import ConfigError, flag, http_url, parse_addr, positive, read_token
from sidecars.slurm import REASON_PREFIX
from sidecars.worker import trusted

POLICIES = ("requeue", "leave")


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    node_name: str
    http_host: str
    http_port: int
    socket_path: Path
    state_dir: Path  # pod-lifetime storage (an emptyDir): the drain record survives an agent restart
    pod_namespace: str
    pod_name: str
    control_plane: str | None = None
    # this pod's projected ServiceAccount token (audience slurm-sidecars), re-read as it rotates
    token_file: Path | None = None
    control_plane_tls: ssl.SSLContext | None = None  # the CA to trust for an https control plane
    http_limits: http.ServerLimits = field(default_factory=http.ServerLimits)
    job_mapping_dir: Path | None = None
    registration_timeout: float = 120.0
    slurmd_restart_command: tuple[str, ...] = ()  # empty: signal the slurmd process if visible
    heal_attempts: int = 3
    heal_backoff: float = 10.0  # wait after the first restart; doubles after each further one
    poll_seconds: float = 15.0  # steady-state rate of the agent's own look at its node
    drain_poll_seconds: float = 0.25  # only while a drain waits for jobs to end
    drain_timeout_policy: str = "requeue"
    default_drain_timeout: float = 3600.0
    slurmd_missing_grace: float = 5.0  # a 24.11 reconfigure re-execs slurmd: a short gap is no death
    stale_seconds: float = 90.0  # /livez fails when the agent loop has not turned for this long
    slurm_timeout: float = 15.0  # scontrol retries ~9 s before saying the controller is unreachable
    dynamic: bool = False  # delete the node's record after the drain (also detected from `slurmd -Z`)
    node_name_from: str = "pod"  # "kube-node": named after the Kubernetes Node (DaemonSet workers)
    kube_node: str = ""  # the pod's spec.nodeName (downward API), for --node-name-from=kube-node
    node_name_annotation: str = ANNOTATION  # a Node annotation that overrides its name; "": none
    worker_selector: str = "app.kubernetes.io/component=worker"  # kube-node: the worker pods on a Node
    imex_channel: Path = Path("/dev/nvidia-caps-imex-channels/channel0")  # switch/nvidia_imex readiness
    # kube-node: slurmd's `--conf Topology=` at registration, by the control plane's flags and rule
    topology: TopologySpec | None = None

    @property
    def pod(self) -> str:
        return f"{self.pod_namespace}/{self.pod_name}"

    def drain_reason(self, extra: str | None = None) -> str:
        """`slurm-sidecars: pod ns/name terminating[: extra]`: recognisably ours, naming the pod."""
        base = f"{REASON_PREFIX} pod {self.pod} terminating"
        return f"{base}: {extra.strip()}" if extra and extra.strip() else base


def is_our_reason(reason: str | None) -> bool:
    """A reason the worker agent wrote for a terminating pod (not the control plane's own drains)."""
    return bool(reason) and str(reason).startswith(f"{REASON_PREFIX} pod ") and " terminating" in str(reason)


def configure(p: argparse.ArgumentParser) -> None:
    flag(p, "--node-name", default="", help="this pod's Slurm node name (or --node-name-from=kube-node)")
    flag(
        p,
        "--node-name-from",
        default="pod",
        choices=list(SOURCES),
        help="pod: --node-name is the name; kube-node: the Kubernetes Node's name (or its annotation)",
    )
    flag(p, "--kube-node-name", default="", help="the pod's spec.nodeName (downward API), for kube-node")
    flag(
        p,
        "--imex-channel",
        default="/dev/nvidia-caps-imex-channels/channel0",
        help="with SwitchType=switch/nvidia_imex in slurm.conf: readiness needs this IMEX channel device",
    )
    flag(
        p,
        "--worker-selector",
        default="app.kubernetes.io/component=worker",
        help="kube-node: label selector of the worker pods (two on one Node: the older holds the node)",
    )
    flag(
        p,
        "--node-name-annotation",
        default=ANNOTATION,
        help="a Node annotation that overrides the Node's name as the Slurm node name; empty: none",
    )
    topology.add_flags(p, note="kube-node, as given to the control plane (slurmd registers there, 25.05+): ")
    flag(p, "--http", required=True, help="HOST:PORT for /livez /readyz /metrics /status")
    flag(p, "--socket", required=True, help="unix socket the drain hook calls")
    flag(
        p, "--state-dir", help="pod-lifetime directory for the drain record (default: the socket's directory)"
    )
    flag(p, "--control-plane", help="control plane base URL (coordinated mode)")
    flag(
        p,
        "--token-file",
        help="this pod's projected ServiceAccount token for the control plane (re-read as the kubelet "
        "rotates it)",
    )
    flag(p, "--ca-file", default=None, help="CA certificate(s) to trust for an https control plane")
    http.configure_limits(p)
    flag(p, "--job-mapping-dir", help="keep dcgm-exporter GPU-index -> job id files here")
    flag(p, "--registration-timeout-seconds", default="120", help="slurmd must register within this")
    flag(
        p,
        "--slurmd-restart-command",
        default="",
        help="command that restarts slurmd (shell words); empty: signal slurmd when its process is visible",
    )
    flag(p, "--heal-attempts", default="3", help="slurmd restarts before declaring the pod unregistered")
    flag(p, "--heal-backoff-seconds", default="10", help="wait after a restart; doubles each time")
    flag(p, "--poll-seconds", default="15", help="steady-state interval of the agent's node check")
    flag(p, "--drain-poll-seconds", default="0.25", help="node check interval while a drain waits")
    flag(
        p,
        "--drain-timeout-policy",
        default="requeue",
        choices=list(POLICIES),
        help="on drain time-out: requeue (set DOWN so batch jobs requeue) or leave",
    )
    flag(p, "--drain-timeout-seconds", default="3600", help="drain time-out when the hook gives none")
    flag(p, "--slurmd-missing-grace-seconds", default="5", help="slurmd may be absent this long (re-exec)")
    flag(p, "--stale-seconds", default="90", help="/livez fails when the loop is older than this")
    flag(p, "--slurm-timeout-seconds", default="15", help="time-out of one Slurm command")
    flag(
        p,
        "--dynamic-node",
        default="false",
        choices=["true", "false"],
        help="delete the node's Slurm record after the drain (dynamic node, `slurmd -Z`)",
    )


def from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> WorkerSettings:
    env = os.environ if env is None else env
    name = str(args.node_name or "").strip()
    source = args.node_name_from
    if source not in SOURCES:
        raise ConfigError(f"--node-name-from: one of {', '.join(SOURCES)}, got {source!r}")
    kube_node = str(args.kube_node_name or "").strip()
    if source == "kube-node":
        if name:
            raise ConfigError("--node-name and --node-name-from=kube-node: give one, not both")
        if not kube_node:
            raise ConfigError("--node-name-from=kube-node needs --kube-node-name (the pod's spec.nodeName)")
    elif not is_node_name(name):
        raise ConfigError(f"--node-name: not a single Slurm node name: {args.node_name!r}")
    annotation = str(args.node_name_annotation or "").strip()
    if annotation and any(c.isspace() or c in "=:," for c in annotation):
        raise ConfigError(f"--node-name-annotation: not an annotation key: {args.node_name_annotation!r}")
    host, port = parse_addr(args.http)
    sock = Path(args.socket)
    if len(str(sock)) > 100:
        raise ConfigError(f"--socket: path longer than 100 characters: {sock}")
    if not sock.parent.is_dir():
        raise ConfigError(f"--socket: directory {sock.parent} does not exist")
    control_plane = token_file = None
    if args.control_plane:
        control_plane = http_url(args.control_plane, "--control-plane")
        read_token(args.token_file)  # readable and not empty now: exit 2 at start, not a 401 later
        token_file = Path(args.token_file)
    try:
        restart = tuple(shlex.split(args.slurmd_restart_command or ""))
    except ValueError as exc:
        raise ConfigError(f"--slurmd-restart-command: {exc}") from None
    mapping = Path(args.job_mapping_dir) if args.job_mapping_dir else None
    if mapping is not None:
        try:
            mapping.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--job-mapping-dir: cannot create {mapping}: {exc.strerror}") from None
    state_dir = Path(args.state_dir) if args.state_dir else sock.parent
    if not state_dir.is_dir():
        raise ConfigError(f"--state-dir: {state_dir} is not a directory")
    if args.drain_timeout_policy not in POLICIES:
        raise ConfigError(
            f"--drain-timeout-policy: one of {', '.join(POLICIES)}, got {args.drain_timeout_policy!r}"
        )
    if args.dynamic_node not in ("true", "false"):
        raise ConfigError(f"--dynamic-node: true or false, got {args.dynamic_node!r}")
    spec = topology.from_args(args)
    if spec is not None and source != "kube-node":
        raise ConfigError("--topology-labels needs --node-name-from=kube-node (the agent reads its Node)")
    attempts = int(positive(args.heal_attempts, "--heal-attempts", conv=int, allow_zero=True))
    settings = WorkerSettings(
        node_name=name,
        http_host=host,
        http_port=port,
        socket_path=sock,
        state_dir=state_dir,
        pod_namespace=env.get("POD_NAMESPACE") or "default",
        pod_name=env.get("POD_NAME") or socket.gethostname(),
        control_plane=control_plane,
        token_file=token_file,
        control_plane_tls=http.client_tls(args.ca_file),
        http_limits=http.limits_from(args),
        job_mapping_dir=mapping,
        registration_timeout=positive(args.registration_timeout_seconds, "--registration-timeout-seconds"),
        slurmd_restart_command=restart,
        heal_attempts=attempts,
        heal_backoff=positive(args.heal_backoff_seconds, "--heal-backoff-seconds"),
        poll_seconds=positive(args.poll_seconds, "--poll-seconds"),
        drain_poll_seconds=positive(args.drain_poll_seconds, "--drain-poll-seconds"),
        drain_timeout_policy=args.drain_timeout_policy,
        default_drain_timeout=positive(args.drain_timeout_seconds, "--drain-timeout-seconds"),
        slurmd_missing_grace=positive(
            args.slurmd_missing_grace_seconds, "--slurmd-missing-grace-seconds", allow_zero=True
        ),
        stale_seconds=positive(args.stale_seconds, "--stale-seconds"),
        slurm_timeout=positive(args.slurm_timeout_seconds, "--slurm-timeout-seconds"),
        dynamic=args.dynamic_node == "true",
        node_name_from=source,
        kube_node=kube_node,
        node_name_annotation=annotation,
        worker_selector=str(args.worker_selector or ""),
        imex_channel=Path(args.imex_channel),
        topology=spec,
    )
    # last, once every value is good: a job's user must not be able to swap the socket, the drain
    # record or the GPU mapping
    private = {"--socket": sock.parent, "--state-dir": state_dir}
    trusted.check_dirs({**private, "--job-mapping-dir": mapping} if mapping is not None else private)
    return settings
