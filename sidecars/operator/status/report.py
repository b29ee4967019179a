"""What `status` shows: rows for nodes and jobs, and the report that gathers every source's answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRow:
    name: str
    state: str  # base state, e.g. MIXED
    flags: tuple[str, ...]  # e.g. ("DRAIN",)
    reason: str | None
    jobs: tuple[int, ...]
    busy_until: int | None  # epoch seconds: when the last job on it is expected to end
    reason_since: int | None = None  # epoch seconds the reason was set, where the source says

    @property
    def draining(self) -> bool:
        """DRAIN set while jobs still run: a drain in progress."""
        return "DRAIN" in self.flags and (
            bool(self.jobs) or self.state in {"ALLOCATED", "MIXED"} or "COMPLETING" in self.flags
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRow:
    job_id: int
    state: str
    why: str  # Slurm's reason while pending (Resources, Priority, ...)
    partition: str
    user: str
    name: str
    nodes: tuple[str, ...]
    end_time: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusReport:
    """Everything read for one table; a source that failed left its part None and a line in `errors`."""

    source: str  # where nodes came from: "slurm" or the control-plane URL
    nodes: list[NodeRow] | None = None
    jobs: list[JobRow] | None = None
    scale_in: list[str] | None = None
    planned: tuple[str, ...] | None = None  # maintenance windows and the upgrade, from the control plane
    config: dict[str, Any] | None = None
    config_asked: bool = False
    slurmctld: dict[str, Any] | None = None  # several controllers: who is in control (controllers.py)
    errors: tuple[str, ...] = field(default=())


class SourceError(Exception):
    """A source could not be read; the message says which and why, in a line."""
