"""Where a Kubernetes Node's labels place its Slurm node in a Slurm topology: one rule, used by the
control plane (moving nodes in place, rendering the topology file) and by a DaemonSet worker's agent
(slurmd's `--conf Topology=` at registration), so the two never disagree.

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
refused: nothing is sent (slurm-operator #261: an empty topology broke node registration).
Pure: no API call here, and no kubernetes-asyncio import.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from sidecars.runtime.settings import (
    ConfigError,
    choice,
    declared,
    setting,
    settings_from,
)
from sidecars.runtime.settings import (
    add_flags as add_setting_flags,
)

KINDS = ("tree", "block")
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


@declared()
class TopologyFlags:
    """--topology-labels, --topology-type and --topology-name: one definition for the control plane
    and the worker agent, which must be given the same."""

    labels: str = setting(
        default="",
        flag="--topology-labels",
        help="comma-separated Kubernetes Node label keys, outermost first (e.g. "
        "topology.kubernetes.io/zone,example.com/rack), placing each worker's Slurm node; empty: off",
    )
    type: str = setting(
        default="tree",
        flag="--topology-type",
        conv=choice(*KINDS),
        help="tree: a switch per label level under one root; block: a block per distinct set of values",
    )
    name: str = setting(
        default="kubernetes",
        flag="--topology-name",
        help="the topology's name in slurmctld's topology.yaml (and the tree's root switch)",
    )


def add_flags(parser: argparse.ArgumentParser, *, note: str = "") -> None:
    """The topology flags (`note` leads their help: the agent's must match the control plane's)."""
    add_setting_flags(parser, TopologyFlags, note=note)


def from_args(args: argparse.Namespace) -> TopologySpec | None:
    """The topology flags, checked; None when no labels are named (no topology)."""
    given = settings_from(TopologyFlags, args)
    try:
        keys = parse_keys(given.labels)
    except ValueError as exc:
        raise ConfigError(f"--topology-labels: {exc}") from None
    why = check_name(given.name)
    if why is not None:
        raise ConfigError(f"--topology-name: {why}")
    if not keys:
        return None
    return TopologySpec(keys, "block" if given.type == "block" else "tree", given.name)
