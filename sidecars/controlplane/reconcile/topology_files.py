"""Slurm topology files from the places Kubernetes Node labels give (the rules: kube.topology),
with no I/O: topology.yaml (25.05+) or topology.conf, and the in-place moves grouped by place.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from sidecars.kube.topology import Placement, TopologySpec
from sidecars.slurm import hostlist


def _q(text: str) -> str:
    return json.dumps(text)  # a JSON string is a YAML string: "1", "true" or "no" stay strings


def _tree(
    spec: TopologySpec, places: Mapping[str, Placement]
) -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """Each switch's child switches (in order of appearance) and each leaf's nodes."""
    children: dict[str, list[str]] = {spec.name: []}
    nodes: dict[str, set[str]] = {}
    for node, place in sorted(places.items()):
        for parent, child in zip(place.units, place.units[1:], strict=False):
            kids = children.setdefault(parent, [])
            if child not in kids:
                kids.append(child)
            children.setdefault(child, [])
        nodes.setdefault(place.leaf, set()).add(node)
    return children, nodes


def render_yaml(spec: TopologySpec, places: Mapping[str, Placement]) -> str:
    """topology.yaml (Slurm 25.05+) holding one topology, the cluster's default."""
    lines = ["---", f"- topology: {_q(spec.name)}", "  cluster_default: true"]
    if spec.kind == "block":
        blocks: dict[str, set[str]] = {}
        for node, place in places.items():
            blocks.setdefault(place.leaf, set()).add(node)
        lines += ["  block:", "    blocks:"]
        if not blocks:
            lines[-1] += " []"
        for name in sorted(blocks):
            lines += [f"      - block: {_q(name)}", f"        nodes: {_q(hostlist.compress(blocks[name]))}"]
        return "\n".join(lines) + "\n"
    children, nodes = _tree(spec, places)
    lines += ["  tree:", "    switches:"]
    for switch in sorted(children, key=lambda s: (s != spec.name, s)):
        lines.append(f"      - switch: {_q(switch)}")
        if children[switch]:
            lines.append(f"        children: {_q(','.join(children[switch]))}")
        elif switch in nodes:
            lines.append(f"        nodes: {_q(hostlist.compress(nodes[switch]))}")
    return "\n".join(lines) + "\n"


def render_conf(spec: TopologySpec, places: Mapping[str, Placement]) -> str:
    """topology.conf (before 25.05; slurm.conf then names `TopologyPlugin=topology/tree` or
    `topology/block`, the latter from 23.11)."""
    out = [f"# rendered by slurm-sidecars from the Kubernetes Node labels: {', '.join(spec.keys)}"]
    if spec.kind == "block":
        blocks: dict[str, set[str]] = {}
        for node, place in places.items():
            blocks.setdefault(place.leaf, set()).add(node)
        out += [f"BlockName={b} Nodes={hostlist.compress(blocks[b])}" for b in sorted(blocks)]
        return "\n".join(out) + "\n"
    children, nodes = _tree(spec, places)
    for switch in sorted(children, key=lambda s: (s != spec.name, s)):
        if children[switch]:
            out.append(f"SwitchName={switch} Switches={','.join(children[switch])}")
        elif switch in nodes:
            out.append(f"SwitchName={switch} Nodes={hostlist.compress(nodes[switch])}")
    return "\n".join(out) + "\n"


def group(wanted: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """(node, in-place value) pairs -> value -> nodes: one scontrol call per distinct place."""
    out: dict[str, list[str]] = {}
    for node, value in wanted:
        out.setdefault(value, []).append(node)
    return {v: sorted(ns) for v, ns in out.items()}
