"""The worker agent's settings: flags (and `SIDECARS_*` environment) into one frozen dataclass."""

from __future__ import annotations

import argparse
import os
import socket
import ssl
from collections.abc import Mapping
from pathlib import Path

from sidecars.kube import topology
from sidecars.kube.nodename import ANNOTATION, SOURCES, is_node_name
from sidecars.kube.topology import TopologySpec
from sidecars.protocol import drains
from sidecars.runtime import http
from sidecars.runtime.looplag import LoopLagSettings
from sidecars.runtime.settings import (
    ADDRESS,
    BOOL,
    PATH,
    SHELL_WORDS,
    TOKEN_FILE,
    URL,
    ConfigError,
    add_flags,
    choice,
    declared,
    number,
    read_token,
    seconds,
    setting,
    settings_of,
    values,
)
from sidecars.worker import trusted

POLICIES = ("requeue", "leave")


@declared()
class WorkerSettings:
    http_address: tuple[str, int] = setting(
        flag="--http", conv=ADDRESS, required=True, help="HOST:PORT for /livez /readyz /metrics /status"
    )
    node_name: str = setting(help="this pod's Slurm node name (or --node-name-from=kube-node)")
    socket_path: Path = setting(
        flag="--socket", conv=PATH, required=True, help="unix socket the drain hook calls"
    )
    # pod-lifetime storage (an emptyDir): the drain record survives an agent restart
    state_dir: Path = setting(
        conv=PATH, help="pod-lifetime directory for the drain record (default: the socket's directory)"
    )
    pod_namespace: str  # POD_NAMESPACE and POD_NAME, from the downward API
    pod_name: str
    control_plane: str | None = setting(
        default=None, conv=URL, help="control plane base URL (coordinated mode)"
    )
    # this pod's projected ServiceAccount token (audience slurm-sidecars), re-read as it rotates
    token_file: Path | None = setting(
        default=None,
        conv=PATH,
        help="this pod's projected ServiceAccount token for the control plane (re-read as the kubelet "
        "rotates it)",
    )
    viewer_token: str | None = setting(  # /status names the jobs on this node's GPUs
        default=None,
        flag="--viewer-token-file",
        conv=TOKEN_FILE,
        help="read-only token that /status requires; without it /status answers loopback callers only",
    )
    control_plane_tls: ssl.SSLContext | None = setting(
        default=None,
        flag="--ca-file",
        conv=http.CA_FILE,
        help="CA certificate(s) to trust for an https control plane",
    )
    http_limits: http.ServerLimits = settings_of(default_factory=http.ServerLimits, prefix="http")
    loop_lag: LoopLagSettings = settings_of(default_factory=LoopLagSettings)
    job_mapping_dir: Path | None = setting(
        default=None, conv=PATH, help="keep dcgm-exporter GPU-index -> job id files here"
    )
    registration_timeout_seconds: float = setting(
        default=120.0, conv=seconds(), help="slurmd must register within this"
    )
    slurmd_restart_command: tuple[str, ...] = setting(
        default=(),
        conv=SHELL_WORDS,
        help="command that restarts slurmd (shell words); empty: signal slurmd when its process is visible",
    )
    heal_attempts: int = setting(
        default=3, conv=number(zero_ok=True), help="slurmd restarts before declaring the pod unregistered"
    )
    heal_backoff_seconds: float = setting(
        default=10.0, conv=seconds(), help="wait after the first restart; doubles after each further one"
    )
    poll_seconds: float = setting(
        default=15.0,
        conv=seconds(),
        help="steady-state interval of the agent's node check",
    )
    drain_poll_seconds: float = setting(
        default=0.25,
        conv=seconds(),
        help="node check interval while a drain waits",
    )
    fallback_max_seconds: float = setting(
        default=15.0,
        conv=seconds(),
        help="control plane away: the agent's own Slurm checks back off up to this interval, jittered",
    )
    drain_timeout_policy: str = setting(
        default="requeue",
        conv=choice(*POLICIES),
        help="on drain time-out: requeue (set DOWN so batch jobs requeue) or leave",
    )
    drain_timeout_seconds: float = setting(
        default=3600.0, conv=seconds(), help="drain time-out when the hook gives none"
    )
    # a 24.11 reconfigure re-execs slurmd: a short gap is no death
    slurmd_missing_grace_seconds: float = setting(
        default=5.0, conv=seconds(zero_ok=True), help="slurmd may be absent this long (re-exec)"
    )
    stale_seconds: float = setting(
        default=90.0, conv=seconds(), help="/livez fails when the loop is older than this"
    )
    # scontrol retries ~9 s before saying the controller is unreachable
    slurm_timeout_seconds: float = setting(default=15.0, conv=seconds(), help="time-out of one Slurm command")
    dynamic: bool = setting(
        # also detected from `slurmd -Z`
        default=False,
        flag="--dynamic-node",
        conv=BOOL,
        help="delete the node's Slurm record after the drain (dynamic node, `slurmd -Z`)",
    )
    node_name_from: str = setting(
        default="pod",
        conv=choice(*SOURCES),
        help="pod: --node-name is the name; kube-node: the Kubernetes Node's name (or its annotation)",
    )
    kube_node: str = setting(
        default="",
        flag="--kube-node-name",
        help="the pod's spec.nodeName (downward API), for kube-node",
    )
    node_name_annotation: str = setting(
        default=ANNOTATION,
        help="a Node annotation that overrides the Node's name as the Slurm node name; empty: none",
    )
    worker_selector: str = setting(
        default="app.kubernetes.io/component=worker",
        help="kube-node: label selector of the worker pods (two on one Node: the older holds the node)",
    )
    imex_channel: Path = setting(
        default=Path("/dev/nvidia-caps-imex-channels/channel0"),
        conv=PATH,
        help="with SwitchType=switch/nvidia_imex in slurm.conf: readiness needs this IMEX channel device",
    )
    gpu_check: str = setting(
        default="auto",
        conv=choice("auto", "on", "off"),
        help="check this node's GPUs with nvidia-smi (auto: where it is on PATH; on: its absence fails "
        "readiness); a fault fails readiness and drains the node until the check passes",
    )
    gpu_check_interval_seconds: float = setting(
        default=60.0, conv=seconds(), help="how often to check the GPUs"
    )
    gpu_check_timeout_seconds: float = setting(
        default=20.0, conv=seconds(), help="an nvidia-smi silent this long is killed (the check: unknown)"
    )
    gpu_check_drain: bool = setting(
        default=True, conv=BOOL, help="a GPU fault drains this Slurm node (false: readiness only)"
    )
    # kube-node: slurmd's `--conf Topology=` at registration, by the control plane's flags and rule
    topology: TopologySpec | None = None

    @property
    def pod(self) -> str:
        return f"{self.pod_namespace}/{self.pod_name}"

    def drain_reason(self, extra: str | None = None) -> str:
        """`slurm-sidecars: pod ns/name terminating[: extra]`: recognisably ours, naming the pod."""
        return drains.agent_reason(self.pod_namespace, self.pod_name, (extra or "").strip())


def is_our_reason(reason: str | None) -> bool:
    """A reason the worker agent wrote for a terminating pod (not the control plane's own drains)."""
    return bool(reason) and str(reason).startswith(drains.AGENT) and " terminating" in str(reason)


def configure(p: argparse.ArgumentParser) -> None:
    add_flags(p, WorkerSettings)
    topology.add_flags(p, note="kube-node, as given to the control plane (slurmd registers there, 25.05+): ")


def from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> WorkerSettings:
    env = os.environ if env is None else env
    given = values(WorkerSettings, args)
    name = str(given.pop("node_name", "")).strip()
    source = given["node_name_from"] = given.get("node_name_from", "pod")
    kube_node = given["kube_node"] = str(given.get("kube_node", "")).strip()
    if source == "kube-node":
        if name:
            raise ConfigError("--node-name and --node-name-from=kube-node: give one, not both")
        if not kube_node:
            raise ConfigError("--node-name-from=kube-node needs --kube-node-name (the pod's spec.nodeName)")
    elif not is_node_name(name):
        raise ConfigError(f"--node-name: not a single Slurm node name: {args.node_name or ''!r}")
    annotation = given["node_name_annotation"] = str(given.get("node_name_annotation", ANNOTATION)).strip()
    if annotation and any(c.isspace() or c in "=:," for c in annotation):
        raise ConfigError(f"--node-name-annotation: not an annotation key: {args.node_name_annotation!r}")
    sock: Path = given["socket_path"]
    if len(str(sock)) > 100:
        raise ConfigError(f"--socket: path longer than 100 characters: {sock}")
    if not sock.parent.is_dir():
        raise ConfigError(f"--socket: directory {sock.parent} does not exist")
    if given.get("control_plane"):
        # readable and not empty now: exit 2 at start, not a 401 later
        read_token(str(given.get("token_file") or ""))
    else:
        given["token_file"] = None
    mapping: Path | None = given.get("job_mapping_dir")
    if mapping is not None:
        try:
            mapping.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--job-mapping-dir: cannot create {mapping}: {exc.strerror}") from None
    state_dir = given["state_dir"] = given.get("state_dir") or sock.parent
    if not state_dir.is_dir():
        raise ConfigError(f"--state-dir: {state_dir} is not a directory")
    spec = topology.from_args(args)
    if spec is not None and source != "kube-node":
        raise ConfigError("--topology-labels needs --node-name-from=kube-node (the agent reads its Node)")
    settings = WorkerSettings(
        node_name=name,
        pod_namespace=env.get("POD_NAMESPACE") or "default",
        pod_name=env.get("POD_NAME") or socket.gethostname(),
        topology=spec,
        **given,
    )
    # last, once every value is good: a job's user must not be able to swap the socket, the drain
    # record or the GPU mapping
    private = {"--socket": sock.parent, "--state-dir": state_dir}
    trusted.check_dirs({**private, "--job-mapping-dir": mapping} if mapping is not None else private)
    return settings
