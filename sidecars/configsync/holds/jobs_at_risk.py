"""Held for jobs: a change the dry run and the job comparison say would end or requeue jobs (or
leave pending ones nowhere to run) waits until they are gone, unless forced (--allow-job-loss, or a
`slurm-sidecars.force` key in the set naming who: the daemon then records who forced it)."""

from __future__ import annotations

from sidecars.configsync.holds.rule import Change, Hold
from sidecars.configsync.judge import jobs
from sidecars.protocol.configsync import FORCE_FILE, ConfigOutcome
from sidecars.protocol.events import EventReason

__all__ = ["JobsAtRisk"]


class JobsAtRisk:
    name = "jobs"
    outcome = ConfigOutcome.HELD
    event = EventReason.CONFIG_HELD_FOR_JOBS
    again = True  # once the jobs ended, the set applies

    async def holds(self, change: Change) -> Hold | None:
        at_risk = change.verdict.jobs
        if not at_risk or jobs.forced_by(change.files, change.settings.allow_job_loss) is not None:
            return None
        why = (
            f"held: the change {jobs.JobRisk(at_risk).describe()}; "
            f"to apply it anyway add a {FORCE_FILE} key naming who"
        )
        return Hold(why, jobs=tuple(sorted(at_risk)))
