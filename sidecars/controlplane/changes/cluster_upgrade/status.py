"""A whole-cluster upgrade's stages and their states, as reported and as kept for a later Lease holder."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from sidecars.slurm import Version, daemons

STAGES = ("preflight", daemons.SLURMDBD, daemons.SLURMCTLD, "workers")
# a stage's states; the upgrade's own state is the last stage's that is not `pending`
# (`interrupted`: the control plane stopped while the stage ran; last, so the metric's indices hold)
STATES = ("pending", "running", "done", "skipped", "refused", "failed", "rolled_back", "interrupted")
ENDINGS = {"refused", "failed", "rolled_back", "interrupted"}  # the upgrade halts here
# what is said besides a stage's states: a rollback begun, a pause before a stage
ROLLING_BACK, PAUSED = "rolling_back", "paused"


@dataclass
class Stage:
    name: str
    state: str = "pending"
    started_at: float | None = None  # epoch seconds
    seconds: float | None = None
    detail: str = ""
    # the daemon this stage started and saw die: its last line (Slurm's fatal, bounded, redacted),
    # when it died (Slurm's stamp on that line, else when its end was seen), and when the stage
    # acted on it (the rollback began, or the stage halted), all epoch seconds
    last_words: str = ""
    died_at: float | None = None
    acted_at: float | None = None


@dataclass
class ClusterUpgradeStatus:
    target: str
    images: dict[str, str]
    stages: list[Stage] = field(default_factory=lambda: [Stage(n) for n in STAGES])
    paused: bool = False
    # the time slurmctld did not answer during its stage (stop to verified), in seconds
    slurmctld_unanswered_seconds: float | None = None
    backup: str = ""  # where the database dump is
    state_copy: str = ""  # where the copy of the StateSaveLocation is
    # what the new slurmctld must have (live jobs, nodes), read before the first controller stopped:
    # kept so that a slurmctld stage resumed after an interruption judges against the same
    jobs_before: list[int] = field(default_factory=list)
    nodes_before: list[str] = field(default_factory=list)
    resumed_from: str = ""  # the stage an interrupted or halted upgrade was started again at
    roles_memory: dict[str, str] = field(default_factory=dict)  # cluster_roles.memory_of

    @property
    def state(self) -> str:
        """pending, running, paused (between stages), complete, or the stage ending that halted it."""
        for s in self.stages:
            if s.state in ENDINGS:
                return s.state
        if all(s.state in ("done", "skipped") for s in self.stages):
            return "complete"
        if any(s.state == "running" for s in self.stages):
            return "running"
        if self.paused:
            return "paused"
        return "running" if self.stages[0].state != "pending" else "pending"

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def halted_at(self) -> Stage | None:
        """The stage whose ending halted the upgrade (None: it did not halt)."""
        return next((s for s in self.stages if s.state in ENDINGS), None)

    def report(self) -> dict[str, Any]:
        out = {"state": self.state, **asdict(self)}
        # the lists may hold thousands of ids: their sizes say enough on a page
        out["jobs_before"], out["nodes_before"] = len(self.jobs_before), len(self.nodes_before)
        return out

    def data(self) -> dict[str, Any]:
        """Everything, for the store a later Lease holder reads back (`from_data`)."""
        return asdict(self)

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ClusterUpgradeStatus:
        """The status `data()` wrote; ValueError naming what is wrong with anything else."""
        try:
            stages = [Stage(**s) for s in data["stages"]]
            status = cls(
                target=str(data["target"]),
                images={str(k): str(v) for k, v in dict(data["images"]).items()},
                stages=stages,
                paused=bool(data.get("paused", False)),
                slurmctld_unanswered_seconds=data.get("slurmctld_unanswered_seconds"),
                backup=str(data.get("backup", "")),
                state_copy=str(data.get("state_copy", "")),
                jobs_before=[int(j) for j in data.get("jobs_before", [])],
                nodes_before=[str(n) for n in data.get("nodes_before", [])],
                resumed_from=str(data.get("resumed_from", "")),
                roles_memory={str(k): str(v) for k, v in dict(data.get("roles_memory", {})).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"not a cluster upgrade's status ({type(e).__name__}: {e})") from None
        # no digit before its start: a run of digits is read once even when searched (quadratic else)
        if not re.fullmatch(r"(?<!\d)\d++\.\d++\.\d++", status.target):
            raise ValueError(f"not a cluster upgrade's status: its target is {status.target!r}")
        if [s.name for s in stages] != list(STAGES) or any(s.state not in STATES for s in stages):
            seen = [(s.name, s.state) for s in stages]
            raise ValueError(f"not a cluster upgrade's status: its stages are {seen}")
        return status

    def interrupted(self) -> Stage | None:
        """Mark the stage left `running` (its control plane stopped under it) `interrupted`; that stage."""
        for s in self.stages:
            if s.state == "running":
                s.state = "interrupted"
                s.detail = (
                    f"the control plane stopped during this stage (started {_when(s.started_at)}): "
                    "what it did there is unknown; start the upgrade again with the same target to go on "
                    "from here (stages already on the target are skipped; docs/upgrades.md)"
                )
                return s
        return None


def _when(epoch: float | None) -> str:
    return "at an unknown time" if epoch is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


NO_RELEASE = Version(0, 0, 0)  # a controller whose release was not read


LIVE_JOBS = frozenset({"PENDING", "RUNNING", "SUSPENDED", "CONFIGURING"})


def same_release(a: Version, b: Version) -> bool:
    """The same major release (a micro release is not a step in Slurm's window)."""
    return (a.major, a.minor) == (b.major, b.minor)
