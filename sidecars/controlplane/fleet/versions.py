"""The slurmd releases the version skew guard rests on: what each worker agent reported (`-V` of
the binary its slurmd runs), and the node records' `Version` (what slurmd registered with) where no
agent has reported. Reports live in memory: agents repeat them every few minutes, and until they
do a restarted control plane falls back to the node records."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sidecars.slurm import Version

STALE_SECONDS = 900.0  # three missed repeats: the agent is gone, its report no longer counts


@dataclass(frozen=True, slots=True)
class Reported:
    version: Version
    at: float


@dataclass
class AgentVersions:
    clock: Callable[[], float] = time.monotonic
    reports: dict[str, Reported] = field(default_factory=dict)

    def report(self, node: str, version: str) -> None:
        self.reports[node] = Reported(Version.parse(version), self.clock())

    def fresh(self) -> dict[str, Reported]:
        now = self.clock()
        self.reports = {n: r for n, r in self.reports.items() if now - r.at < STALE_SECONDS}
        return dict(self.reports)


def guard_inputs(reported: Mapping[str, Reported], records: Mapping[str, Version]) -> dict[str, Version]:
    """Per node, the agent's report where there is one (the binary that runs now: a slurmd replaced
    in place may not have registered again yet), else the node record's Version; nodes with
    neither are left out (nothing to check)."""
    out = dict(records)
    out.update({n: r.version for n, r in reported.items()})
    return out


def describe(
    controller: Version | None, reported: Mapping[str, Reported], records: Mapping[str, Version]
) -> dict[str, Any]:
    """Both sources side by side, for `/v1/upgrade` and `upgrade status`."""
    nodes: dict[str, dict[str, str | None]] = {}
    for name in sorted({*reported, *records}):
        agent, record = reported.get(name), records.get(name)
        nodes[name] = {
            "agent": str(agent.version) if agent else None,
            "record": str(record) if record else None,
        }
    return {"controller": str(controller) if controller else None, "nodes": nodes}
