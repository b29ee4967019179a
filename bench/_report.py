"""What the benchmarks share: the one line per headline figure that `run_all.py` collects into its
table, the Slurm releases to measure (and a measure run on each), one core to measure on, and the
percentile of a sample."""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable, Sequence

from sidecars.devcluster import Release
from sidecars.devcluster.release import available_releases, build_chroot, host_release, release_named
from sidecars.runtime import logs

SEP = " | "


def result(rid: str, what: str, ours: str, baseline: str, goal: str, met: bool) -> None:
    """Print `RESULT <id> | <what> | <ours> | <baseline> | <goal> | <met>`.

    The fields are free text but must not contain the separator, or the table would shift columns.
    """
    fields = [rid, what, ours, baseline, goal, "yes" if met else "no"]
    for field in fields:
        if SEP.strip() in field:
            raise ValueError(f"RESULT field contains the separator: {field!r}")
    print("RESULT " + SEP.join(fields), flush=True)


async def releases(choice: str) -> list[Release]:
    """The Slurm releases to measure: `host`, `chroot` (built if need be), `sid` (26.05, likewise),
    or `both` (24.11 only when its chroot is already built: a benchmark never spends half a minute
    building it)."""
    if choice == "sid":
        return [await release_named("sid")]
    if choice != "both":
        return [await (host_release() if choice == "host" else build_chroot())]
    found, missing = await available_releases(build=False)
    for why in missing:
        print(f"not measured: {why}")
    return found


async def each_release(
    args: argparse.Namespace, measure: Callable[[Release, argparse.Namespace], Awaitable[None]]
) -> None:
    """`measure` on each release `args.release` chooses, with only warnings logged (the figures
    are the output)."""
    logs.configure(json=False, level="warning")
    for release in await releases(args.release):
        await measure(release, args)


def one_core() -> None:
    """Pin this process to one core: the figures are per core, whatever else the machine runs."""
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})


def percentile(samples: Sequence[float], p: float) -> float:
    """The nearest-rank percentile: the smallest sample with at least p % of the samples at or below it."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), int(-(-p * len(ordered) // 100))))
    return ordered[rank - 1]
