"""A plan: config-sync's pipeline up to, and not including, the swap, run on a candidate set.

Our checks, Slurm's parse, the restart table, the dry run and the job-impact analysis are
validate.py's (called, not repeated here). What this adds is the answer a person reads before a
merge: one verdict, Slurm's own words, the per-file diff against the live set with secret values
withheld (history.py's diff, runtime.redact), which checks ran and which could not, and how long
the dry run took. Nothing here swaps, reconfigures or writes the live state: the validator only
reads the live controller and copies the state into its shadow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sidecars.configsync.apply.runstate import would_wipe
from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.configsync.fileset.secretvalues import values_of
from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.judge.jobs import JobRisk, forced_by
from sidecars.configsync.judge.validate import Judge, Verdict
from sidecars.configsync.report.history import FileChange, changes, json_of
from sidecars.runtime.redact import MIN_VALUE, Redactor
from sidecars.slurm.models import Node

PlanVerdict = Literal["would-apply", "refused", "held-for-jobs", "restart-required", "no-change"]

# the documented exit codes of `slurm-sidecars plan` (2 is a bad invocation, the CLI's own)
EXIT_CODES: dict[PlanVerdict, int] = {
    "would-apply": 0,
    "no-change": 0,
    "refused": 1,
    "held-for-jobs": 3,
    "restart-required": 4,
}

OUR_CHECKS = "our checks (files, node and partition records, included files, plugin names and paths)"
SLURM_PARSE = "Slurm's parse"
RESTART_TABLE = "the restart table"
DRY_RUN = "the dry run (a throwaway slurmctld of this release)"
JOB_IMPACT = "the job-impact analysis"


@dataclass(frozen=True, slots=True)
class Plan:
    verdict: PlanVerdict
    sha256: str  # the candidate's
    live_sha256: str | None  # the set it was compared with (None: none, an offline plan without one)
    reason: str = ""  # why not: Slurm's own words when Slurm gave any, secret values withheld
    jobs: dict[int, str] = field(default_factory=dict)  # held for: job id -> what the change would do
    restart: tuple[str, ...] = ()  # why slurmctld must restart for it
    files: tuple[FileChange, ...] = ()
    checks: tuple[str, ...] = ()  # those that ran, in order
    not_checked: tuple[str, ...] = ()  # what this plan could not check, and why
    dry_run_seconds: float | None = None
    # attribute -> the nodes whose run-time value (`scontrol update`) the change's reconfigure would
    # wipe, and config-sync puts back right after it (runstate.py); None: the live fleet was not read
    wipes: dict[str, list[str]] | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def as_json(self) -> dict[str, Any]:
        return json_of(
            self,
            exit_code=self.exit_code,
            jobs=[{"job_id": j, "why": why} for j, why in sorted(self.jobs.items())],
            dry_run_seconds=None if self.dry_run_seconds is None else round(self.dry_run_seconds, 3),
        )


def secret_values(sets: Iterable[FileSet | None], secret_sources: frozenset[Path]) -> list[str]:
    """The secret values of the sets compared, so that no reason or job line can quote one."""
    found: list[str] = []
    for files in sets:
        for entry in files.files.values() if files is not None else ():
            whole = entry.secret or entry.source in secret_sources
            found += [v for v in values_of(entry, whole) if len(v) >= MIN_VALUE]
    return found


def with_live_secrets(
    candidate: FileSet, live: FileSet | None, secret_sources: frozenset[Path]
) -> tuple[FileSet, list[str]]:
    """The candidate with the live set's Secret files it does not give: a pull request rarely
    carries the cluster's keys (they are not in Git), and without them every plan would be refused
    for a key file removed. The answer names the files kept."""
    if live is None:
        return candidate, []
    kept = [e for n, e in live.files.items() if e.source in secret_sources and n not in candidate.files]
    if not kept:
        return candidate, []
    merged = FileSet.build([*candidate.files.values(), *kept], candidate.problems)
    return merged, sorted(e.name for e in kept)


def _checks_run(verdict: Verdict, live: FileSet | None) -> tuple[str, ...]:
    """What ran. A refusal ends the pipeline: one without the dry run's result came from a check
    before it (the validator does not say which), and is told so."""
    before = (OUR_CHECKS, SLURM_PARSE, *((RESTART_TABLE,) if live is not None else ()))
    if not verdict.ok and verdict.dry_run is None:
        return (f"the checks before the dry run ({', '.join(before)}), up to the first that refused",)
    ran = list(before)
    if verdict.dry_run is not None and not verdict.dry_run.release_mismatch:
        ran.append(DRY_RUN)
        if live is not None and verdict.ok:  # a refusing dry run ends the pipeline before it
            ran.append(JOB_IMPACT)
    return tuple(ran)


async def make_plan(
    validator: Judge,
    candidate: FileSet,
    live: FileSet | None,
    *,
    not_checked: Iterable[str] = (),
    secret_sources: frozenset[Path] = frozenset(),
    allow_job_loss: bool = False,
    fleet: tuple[Mapping[str, Node], SlurmConf] | None = None,
) -> Plan:
    """Judge `candidate` against `live` as config-sync would (`allow_job_loss`: its setting), and
    stop before the swap. With `fleet` (the live nodes, the live set parsed) a plan that reconfigures
    also says what run-time node state that reconfigure would wipe."""
    candidate, kept = with_live_secrets(candidate, live, secret_sources)
    shown = changes(live, candidate, secret_sources=secret_sources)
    live_sha = live.sha256 if live is not None else None
    missing = tuple(not_checked)
    if kept:
        missing += (
            f"the live Secret files the candidate does not give, kept as they are: {', '.join(kept)}",
        )
    if live is not None and candidate.sha256 == live.sha256:
        return Plan("no-change", candidate.sha256, live_sha, not_checked=missing)
    known = secret_values((candidate, live), secret_sources)
    hide = Redactor(lambda: known)
    verdict = await validator.validate(candidate, live)
    seconds = verdict.dry_run.seconds if verdict.dry_run is not None else None
    ran = _checks_run(verdict, live)
    common: dict[str, Any] = {
        "files": shown,
        "checks": ran,
        "not_checked": missing,
        "dry_run_seconds": seconds,
    }
    restart = tuple(hide.text(str(r)) for r in verdict.restart)
    if not verdict.ok:
        return Plan("refused", candidate.sha256, live_sha, reason=hide.text(verdict.reason), **common)
    # a restart on the saved state wipes what a reconfigure does (measured, docs/node-state.md)
    if fleet is not None and verdict.conf is not None:
        common["wipes"] = would_wipe(fleet[0], fleet[1], verdict.conf)
    jobs = {j: hide.text(why) for j, why in verdict.jobs.items()}
    risk = hide.text(JobRisk(verdict.jobs).describe()) if jobs else ""
    forced = forced_by(candidate, allow_job_loss) if jobs else None
    if jobs and forced is None:
        return Plan(
            "held-for-jobs", candidate.sha256, live_sha, reason=risk, jobs=jobs, restart=restart, **common
        )
    # forced past the job check (config-sync would apply it anyway): the jobs are still listed
    said = [f"forced by {hide.text(forced)}: {risk}"] if forced else []
    if restart:
        said.insert(0, "slurmctld must restart to take it: " + "; ".join(restart))
        return Plan(
            "restart-required",
            candidate.sha256,
            live_sha,
            reason="; ".join(said),
            jobs=jobs,
            restart=restart,
            **common,
        )
    return Plan("would-apply", candidate.sha256, live_sha, reason="; ".join(said), jobs=jobs, **common)
