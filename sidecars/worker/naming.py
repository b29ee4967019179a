"""The agent's own Slurm node name, by the rule the control plane uses for every pod (kube.nodename).

`--node-name-from=pod`: `--node-name` is it. `--node-name-from=kube-node` (DaemonSet workers):
the Kubernetes Node's name, or the Node's override annotation, read once at start. The name is
written to `<state-dir>/slurm-node-name`, where the pod's slurmd container reads it
(`slurmd -N "$(cat ...)"`), so slurmd, the agent and the control plane use one name.

Beside it, what slurmd registers with (`--conf Features=... Topology=...`): the NVLink domain
feature and, with `--topology-labels`, the node's place by the control plane's own rule
(kube.topology), so a new dynamic node is in its place from its first registration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from sidecars.kube.gpudomain import registration_features
from sidecars.kube.nodename import NodeNaming, slurm_node_name
from sidecars.kube.topology import placement
from sidecars.runtime.files import replace_atomically
from sidecars.slurm import SlurmError, Version
from sidecars.worker.settings import WorkerSettings

if TYPE_CHECKING:
    from sidecars.kube import KubeNode

log = structlog.get_logger(__name__)

NAME_FILE = "slurm-node-name"
FEATURES_FILE = "slurm-node-features"  # slurmd's `--conf Features=` at registration; empty: none
TOPOLOGY_FILE = "slurm-node-topology"  # slurmd's `--conf Topology=` at registration; empty: none
GetNode = Callable[[str], Awaitable["KubeNode | None"]]
GetRelease = Callable[[], Awaitable[Version]]


class NameUnresolved(RuntimeError):
    """The Slurm node name cannot be decided (a malformed override, the Node unreadable)."""


async def resolve(settings: WorkerSettings, get_node: GetNode | None) -> WorkerSettings:
    """The settings with `node_name` decided. `get_node` reads a Node (None: no Kubernetes API)."""
    if settings.node_name_from != "kube-node":
        return settings
    annotations: dict[str, str] = {}
    if settings.node_name_annotation:
        if get_node is None:
            raise NameUnresolved(
                f"no Kubernetes API to read node {settings.kube_node}'s annotation "
                f"{settings.node_name_annotation} (give --node-name-annotation= to use the Node's name)"
            )
        node = await get_node(settings.kube_node)
        if node is None:
            raise NameUnresolved(f"Kubernetes node {settings.kube_node} not found")
        annotations = dict(node.annotations)
    naming = NodeNaming("kube-node", annotation=settings.node_name_annotation)
    named = slurm_node_name(
        naming, pod_name=settings.pod_name, kube_node=settings.kube_node, node_annotations=annotations
    )
    if named.name is None:
        raise NameUnresolved(named.why)
    log.info("slurm_node_name", node=named.name, source=named.why)
    return dataclasses.replace(settings, node_name=named.name)


def _write(path: Path, text: str) -> Path:
    """Replaced atomically: slurmd's container may be reading it."""
    replace_atomically(path, text)
    return path


def write_name(settings: WorkerSettings) -> Path:
    """`<state-dir>/slurm-node-name`: slurmd's container starts slurmd once it is there."""
    return _write(settings.state_dir / NAME_FILE, settings.node_name + "\n")


async def write_features(settings: WorkerSettings, get_node: GetNode | None) -> str:
    """`<state-dir>/slurm-node-features`: the GPU domain features slurmd registers with (the
    Node's NVLink clique label, checked: an empty or malformed value gives an empty file, and
    slurmd then passes no `Features=`). Written before the name file, which slurmd waits for."""
    features = ""
    node = await get_node(settings.kube_node) if get_node is not None else None
    if node is not None:
        features = registration_features(node.name, node.labels)
    _write(settings.state_dir / FEATURES_FILE, features + "\n" if features else "")
    return features


async def write_topology(settings: WorkerSettings, get_node: GetNode | None, release: GetRelease) -> str:
    """`<state-dir>/slurm-node-topology`: `<topology>:<units>` from the Node's labels (the value the
    control plane would move the node to), or empty: no `--topology-labels`, no Node, a label
    missing, empty or malformed (never an empty unit: slurmctld takes `Topology=t:` and leaves the
    node out of the topology, slurm-operator #261), or a release before 25.05 (slurmd has no
    topology at registration there). Empty: slurmd registers with no Topology= and the control
    plane's in-place sync places it. Written before the name file, which slurmd waits for."""
    value = ""
    spec = settings.topology
    node = await get_node(settings.kube_node) if spec is not None and get_node is not None else None
    if spec is not None:
        place = placement(spec, node.labels) if node is not None else "no Kubernetes Node read"
        if isinstance(place, str):
            log.warning("topology_at_registration_skipped", kube_node=settings.kube_node, why=place)
        else:
            value = await _if_supported(place.in_place(spec), release)
    _write(settings.state_dir / TOPOLOGY_FILE, value + "\n" if value else "")
    return value


async def _if_supported(value: str, release: GetRelease) -> str:
    try:
        version = await release()
    except (SlurmError, OSError) as exc:  # OSError: no slurmd binary to ask
        log.warning("topology_at_registration_skipped", why=f"Slurm release unknown: {exc}")
        return ""
    if not version.at_least(25, 5):
        log.warning(
            "topology_at_registration_unavailable",
            release=str(version),
            detail="slurmd takes Topology= at registration from 25.05: the control plane places the node",
        )
        return ""
    log.info("topology_at_registration", topology=value)
    return value
