"""config-sync's pipeline run here, with no cluster: the local Slurm parses and dry-runs the
candidate against an empty state, and the answer lists what that could not check.

No command of this plan may reach a controller: the client is guarded so that only the parse
(`scontrol --version`, which sends nothing) runs; a question for the live cluster (its jobs, its
PluginDir) is refused at once instead of waiting out Slurm's own retries for a controller that
is not there.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from sidecars.configsync.dryrun.runner import DryRunner
from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.judge.validate import Validator
from sidecars.configsync.plans.plan import Plan, make_plan
from sidecars.operator.plan.settings import PlanSettings
from sidecars.slurm import SlurmClient
from sidecars.slurm.offline import parse_only

# what an offline plan cannot know, whatever the set
NO_CLUSTER = (
    "the cluster's jobs, nodes and reservations: the dry run loaded an empty state",
    "the live slurmctld's release: the local Slurm judged the set",
    "the controllers that answer now (a controller host the set drops)",
)


# what slurmctld 24.11+ says when auth/munge finds no munged: it encodes a credential at start, so the
# throwaway dies of this machine, not of the set (22.05 starts without one)
NO_MUNGED = "Did you start munged?"
MUNGED_HINT = (
    "offline: no munged answers on this machine, and this release's slurmctld needs one to start "
    "(any key will do: docs/plan.md)"
)


def local_reason(plan: Plan) -> Plan:
    """The plan, with a refusal that came from this machine rather than the set said to be so."""
    if plan.verdict != "refused" or NO_MUNGED not in plan.reason:
        return plan
    return dataclasses.replace(plan, reason=f"{MUNGED_HINT}; {plan.reason}")


def not_checked(live: FileSet | None, plugin_dir: Path | None) -> tuple[str, ...]:
    missing = list(NO_CLUSTER)
    if live is None:
        missing.insert(0, "the live set: none given (--against), so no diff, restart table or job impact")
    if plugin_dir is None:
        missing.append("plugin names: no PluginDir (--plugin-dir, or PluginDir in the set)")
    return tuple(missing)


async def plan_offline(
    how: PlanSettings, candidate: FileSet, live: FileSet | None, secret_sources: frozenset[Path]
) -> Plan:
    plugin_dir = how.plugin_dir
    if plugin_dir is None:  # the set's own, first of its list, when this machine has it
        options = conffile.parse(candidate, how.main_file, how.target).options
        named = options.get("plugindir", "").split(":")[0]
        plugin_dir = Path(named) if named and Path(named).is_dir() else None
    with tempfile.TemporaryDirectory(prefix="slurm-sidecars-plan-") as scratch:
        work = Path(scratch)
        empty = work / "empty-state"
        empty.mkdir(mode=0o700)
        client = SlurmClient(guard=parse_only)
        validator = Validator(
            client,
            how.target,
            work,
            main=how.main_file,
            max_bytes=how.max_file_bytes,
            parse_timeout=how.timeout_seconds,
            plugin_dir=plugin_dir,
            dry_runner=DryRunner(
                command=how.slurmctld,
                work_dir=work / "dry-run",
                target=how.target,
                main=how.main_file,
                isolation=how.isolation,
                timeout=how.timeout_seconds,
                state_dir=empty,  # never a StateSaveLocation the set names on this machine
            ),
        )
        plan = await make_plan(
            validator,
            candidate,
            live,
            not_checked=not_checked(live, plugin_dir),
            secret_sources=secret_sources,
        )
    return local_reason(plan)
