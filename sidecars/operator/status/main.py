"""`slurm-sidecars status`: read, print, exit 1 when a source could not be read."""

from __future__ import annotations

import argparse
import asyncio
import sys

from sidecars.operator.status.collect import collect
from sidecars.operator.status.render import render
from sidecars.operator.status.settings import StatusSettings, configure
from sidecars.runtime import logs
from sidecars.runtime.daemon import EXIT_FAILURE, EXIT_OK

__all__ = ["configure", "main"]


def main(args: argparse.Namespace) -> int:
    settings = StatusSettings.from_args(args)
    if logs.asked(args).log_level == "info":
        # the table is the output; routine log lines (release detected, ...) would only clutter it
        logs.configure(level="warning")
    snap = asyncio.run(collect(settings))
    sys.stdout.write(render(snap))
    sys.stdout.flush()
    for error in snap.errors:
        print(f"slurm-sidecars status: {error}", file=sys.stderr)
    return EXIT_FAILURE if snap.errors else EXIT_OK
