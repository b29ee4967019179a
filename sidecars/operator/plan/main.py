"""`slurm-sidecars plan -f FILE|DIR|-`: config-sync's pipeline up to the swap, on a candidate.

Exit codes (docs/plan.md): 0 would apply (or no change), 1 refused, 3 held for jobs, 4 restart
required, 2 a bad invocation (the input unreadable, a flag wrong), 5 no plan (config-sync
unreachable, busy with another plan, or refusing the request).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from sidecars.configsync.plans.plan import EXIT_CODES
from sidecars.operator.plan.inputs import read_candidate
from sidecars.operator.plan.offline import plan_offline
from sidecars.operator.plan.online import EXIT_NO_PLAN, ConfigSyncPlanner, NoPlan, plan_online
from sidecars.operator.plan.render import render
from sidecars.operator.plan.settings import PlanSettings, configure
from sidecars.runtime import logs

__all__ = ["configure", "main"]


def main(args: argparse.Namespace) -> int:
    settings = PlanSettings.from_args(args)
    if logs.asked(args).log_level == "info":
        # the answer is the output (what it could not check included); the pipeline's own notes of
        # that (no controller to ask) would only repeat it
        logs.configure(level="error")
    candidate = read_candidate(settings.filename, settings.max_file_bytes, settings.select)
    live = (
        read_candidate(settings.against, settings.max_file_bytes, settings.select)
        if settings.against is not None
        else None
    )
    secret = candidate.secret_sources | (live.secret_sources if live is not None else frozenset())
    if settings.config_sync is not None and settings.token is not None:  # both or neither (from_args)
        where = ConfigSyncPlanner(
            url=settings.config_sync.rstrip("/"),
            token=settings.token,
            timeout_seconds=settings.timeout_seconds,
            tls=settings.tls,
        )
        try:
            answer = asyncio.run(plan_online(where, candidate.files, secret))
        except NoPlan as exc:
            print(f"slurm-sidecars plan: {exc}", file=sys.stderr)
            return EXIT_NO_PLAN
    else:
        answer = asyncio.run(
            plan_offline(settings, candidate.files, live.files if live else None, secret)
        ).as_json()
    output = settings.output or ("json" if sys.stdout.isatty() else "markdown")
    sys.stdout.write(json.dumps(answer, indent=2) + "\n" if output == "json" else render(answer))
    sys.stdout.flush()
    code = answer.get("exit_code")
    return code if isinstance(code, int) and code in EXIT_CODES.values() else EXIT_NO_PLAN
