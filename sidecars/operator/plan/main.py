"""`slurm-sidecars plan -f FILE|DIR|-`: config-sync's pipeline up to the swap, on a candidate.

Exit codes (docs/plan.md): 0 would apply (or no change), 1 refused, 3 held for jobs, 4 restart
required, 2 a bad invocation (the input unreadable, a flag wrong).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from sidecars.operator.plan.inputs import read_candidate
from sidecars.operator.plan.offline import Offline, plan_offline
from sidecars.operator.plan.render import render
from sidecars.operator.plan.settings import PlanSettings, configure
from sidecars.runtime import logs

__all__ = ["configure", "main"]


def main(args: argparse.Namespace) -> int:
    settings = PlanSettings.from_args(args)
    if getattr(args, "log_level", "info") == "info":
        # the answer is the output (what it could not check included); the pipeline's own notes of
        # that (no controller to ask) would only repeat it
        logs.configure(level="error")
    candidate = read_candidate(settings.filename, settings.max_file_bytes, settings.select)
    live = (
        read_candidate(settings.against, settings.max_file_bytes, settings.select)
        if settings.against is not None
        else None
    )
    how = Offline(
        slurmctld=settings.slurmctld,
        target=settings.target,
        main=settings.main_file,
        plugin_dir=settings.plugin_dir,
        isolation=settings.isolation,
        timeout_seconds=settings.timeout_seconds,
        max_file_bytes=settings.max_file_bytes,
    )
    secret = candidate.secret_sources | (live.secret_sources if live is not None else frozenset())
    plan = asyncio.run(plan_offline(how, candidate.files, live.files if live else None, secret))
    answer = plan.as_json()
    output = settings.output or ("json" if sys.stdout.isatty() else "markdown")
    sys.stdout.write(json.dumps(answer, indent=2) + "\n" if output == "json" else render(answer))
    sys.stdout.flush()
    return plan.exit_code
