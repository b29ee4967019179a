"""Slurm topology from Kubernetes Node labels: the rules, with no I/O.

`--topology-labels K1,K2,...` names label keys from the outermost level to the innermost (e.g.
`topology.kubernetes.io/zone,example.com/rack`). A worker's place is the values of those labels on
the Kubernetes Node its pod runs on:

- tree (`--topology-type tree`): a root switch named after the topology, one switch per level
  under it; a level's switch is named by the values down to it joined with `/` (`zone-a`,
  `zone-a/r1`), so two racks called `r1` in two zones stay two switches. Slurm places nodes on the
  leaf (the last level).
- block: one block per distinct tuple of values, named the same way (`zone-a/r1`).

`/` cannot occur in a label value, so names never collide. A value that is missing, empty, not a
valid Kubernetes label value, or that makes a switch name longer than Slurm's 64 characters is
refused: the node keeps its last good place (slurm-operator #261: an empty topology broke node
registration).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from sidecars.slurm import hostlist

Kind = Literal["tree", "block"]
_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")  # Kubernetes' label value
MAX_SWITCH = 64  # Slurm refuses longer switch names


@dataclass(frozen=True, slots=True)
class TopologySpec:
    keys: tuple[str, ...]
    kind: Kind = "tree"
    name: str = "kubernetes"  # the topology's name in topology.yaml, and the tree's root switch


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one node goes: the units from the root down (tree: switches; block: the one block)."""

    units: tuple[str, ...]

    def in_place(self, spec: TopologySpec) -> str:
        """The value of `scontrol update nodename=N topology=...` for this place."""
        return ":".join((spec.name, *self.units))

    @property
    def leaf(self) -> str:
        return self.units[-1]


def check_name(name: str) -> str | None:
    """Why `name` cannot be a topology or unit name, or None."""
    if not _VALUE.match(name):
        return f"{name!r} is not a valid name (letters, digits, '-', '_', '.'; at most 63)"
    return None


def placement(spec: TopologySpec, labels: Mapping[str, str]) -> Placement | str:
    """The node's place from its Kubernetes Node's labels, or why there is none."""
    values: list[str] = []
    for key in spec.keys:
        value = labels.get(key)
        if value is None:
            return f"label {key} is missing"
        if not value.strip():
            return f"label {key} is empty"
        if not _VALUE.match(value):
            return f"label {key}={value!r} is not a value Slurm can take (letters, digits, '-', '_', '.')"
        values.append(value)
    paths = tuple("/".join(values[: i + 1]) for i in range(len(values)))
    long = next((p for p in paths if len(p) > MAX_SWITCH), None)
    if long is not None:
        return f"topology unit {long!r} is longer than Slurm's {MAX_SWITCH} characters"
    if spec.kind == "block":
        return Placement((paths[-1],))
    return Placement((spec.name, *paths))


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


def parse_keys(text: str) -> tuple[str, ...]:
    """`--topology-labels`: comma-separated label keys; ValueError for one that is not a key."""
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    for key in keys:
        prefix, _, name = key.rpartition("/")
        if not _VALUE.match(name) or len(prefix) > 253 or any(c.isspace() or c in "=:," for c in key):
            raise ValueError(f"not a label key: {key!r}")
    if len(set(keys)) != len(keys):
        raise ValueError("a label key is named twice")
    return keys


def group(wanted: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """(node, in-place value) pairs -> value -> nodes: one scontrol call per distinct place."""
    out: dict[str, list[str]] = {}
    for node, value in wanted:
        out.setdefault(value, []).append(node)
    return {v: sorted(ns) for v, ns in out.items()}
