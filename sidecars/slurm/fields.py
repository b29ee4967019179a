"""The Node and Job fields Slurm prints alike in its JSON and in its one-line text output, stated
once: the model's field, its JSON key, its `scontrol -o` key, and what kind of value it holds.

Each format (`jsonformat`, `textformat`) brings one reader per kind; what only one format does
(a node's state and reason, a job's times, nodes and GPUs) stays in that format's module.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class Kind(enum.Enum):
    COUNT = enum.auto()  # a whole number, 0 when unset
    MAYBE_COUNT = enum.auto()  # a whole number, None when unset
    WORDS = enum.auto()  # a comma list
    GRES = enum.auto()  # a GRES string without the per-index detail, "" when unset
    TEXT = enum.auto()  # a string, "" when unset (or one of the text output's null words)
    NAME = enum.auto()  # a string as Slurm wrote it (a job may well be named "None")
    TIME = enum.auto()  # epoch seconds, None when unset


@dataclass(frozen=True, slots=True)
class Field:
    name: str  # the model's
    json_key: str
    text_key: str
    kind: Kind


Readers = Mapping[Kind, Callable[[Any], Any]]

NODE = (
    Field("cpus", "cpus", "CPUTot", Kind.COUNT),
    Field("alloc_cpus", "alloc_cpus", "CPUAlloc", Kind.COUNT),
    Field("real_memory", "real_memory", "RealMemory", Kind.COUNT),
    Field("features", "features", "AvailableFeatures", Kind.WORDS),
    Field("active_features", "active_features", "ActiveFeatures", Kind.WORDS),
    Field("gres", "gres", "Gres", Kind.GRES),
    Field("gres_used", "gres_used", "GresUsed", Kind.GRES),
    Field("address", "address", "NodeAddr", Kind.TEXT),
    Field("hostname", "hostname", "NodeHostName", Kind.TEXT),
    Field("partitions", "partitions", "Partitions", Kind.WORDS),
    Field("boot_time", "boot_time", "BootTime", Kind.TIME),
    Field("slurmd_start_time", "slurmd_start_time", "SlurmdStartTime", Kind.TIME),
    Field("comment", "comment", "Comment", Kind.TEXT),
    Field("topology", "topology", "Topology", Kind.TEXT),
    Field("weight", "weight", "Weight", Kind.MAYBE_COUNT),
)

JOB = (
    Field("name", "name", "JobName", Kind.NAME),
    Field("partition", "partition", "Partition", Kind.NAME),
    Field("submit_time", "submit_time", "SubmitTime", Kind.TIME),
    Field("cpus", "cpus", "NumCPUs", Kind.COUNT),
)


def read_json(table: Sequence[Field], obj: Mapping[str, Any], readers: Readers) -> dict[str, Any]:
    """The table's fields of one JSON object, by the model's names."""
    return {f.name: readers[f.kind](obj.get(f.json_key)) for f in table}


def read_text(table: Sequence[Field], d: Mapping[str, str], readers: Readers) -> dict[str, Any]:
    """The table's fields of one text record (its pairs as a dict), by the model's names."""
    return {f.name: readers[f.kind](d.get(f.text_key)) for f in table}
