"""P1-scale: config-sync at the size our users run, on each release.

Run: `.venv/bin/python bench/config_at_size.py [--release host|chroot|sid|both] [--changes 20]
[--jobs 10000] [--records 1000] [--reach unreachable,refused]` (`--jobs 1000,10000,50000` adds points
to see how the cost grows).

The cluster: 3 real nodes, 1,000 node records without a slurmd (DOWN, not provisioned) and 10,000
pending held batch jobs in the state (individual jobs, not arrays). slurmctld messages the records
at each ping round. With `--reach unreachable` (first, the goal's) each message fails at once, as it
ends at once when a slurmd answers; with `refused` (printed too, so that nothing is hidden) Slurm
retries each for 10 s, and on 24.11+ a reconfigure in that window first waits up to 3 s for them
(ClusterSpec.record_reach, docs/config-sync-dry-run.md). On each, in the same run:

- the baseline: a bare `scontrol reconfigure` (timed to its return, as the field's loop runs it;
  24.11 and later re-execute slurmctld, which is waited for before the next one);
- config-sync with the dry run on, as it ships: from the kubelet's `..data` swap to the change
  applied and verified, over 20 lone changes (a partition's MaxTime), settle period 0 (a fixed wait
  added to every sample, not latency);
- the same with the dry run off: what the verification at size costs on its own.

The dry run's own cost is printed beside them. A change refused instead of applied is counted and
its reason printed; after 3 refusals in a row the series stops (the goal is then not met).
The first change after config-sync started is printed apart (P1-scale-first), beside Slurm's own
first `scontrol reconfigure` of the same cluster (the baseline's first sample): config-sync builds the
dry run's copy of the state when it starts, in the background, so that change should cost no more
than that reconfigure plus 0.5 s.
Goal: p99 <= 1 s on every release for the changes after the first, the dry run on.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from _report import percentile, releases, result
from config_latency import base_files, sha_of, with_max_time
from prometheus_client import CollectorRegistry

from sidecars.configsync.dryrun.runner import DryRunner
from sidecars.configsync.main import running
from sidecars.configsync.report.record import Phases
from sidecars.configsync.settings import Settings
from sidecars.devcluster import ClusterSpec, DevCluster, Release
from sidecars.devcluster.volume import AtomicVolume
from sidecars.runtime import logs
from sidecars.slurm.runner import SlurmMetrics

GIVE_UP_AFTER = 3  # refusals in a row
CHANGE_SECONDS = 120.0  # one change's outcome is waited for at most this long


async def bare_reconfigures(cluster: DevCluster, count: int) -> list[float]:
    """The baseline: `scontrol reconfigure` timed to its return; slurmctld answering again before
    the next one (24.11+ re-execute it)."""
    client = cluster.client(timeout=30.0)
    out = []
    for _ in range(count):
        started = time.monotonic()
        await client.reconfigure()
        out.append(time.monotonic() - started)
        while not (await client.ping()).up:
            await asyncio.sleep(0.05)
        await asyncio.sleep(random.uniform(0.05, 0.3))
    return out


@dataclass
class Series:
    """`count` lone changes through one config-sync."""

    samples: list[float] = field(default_factory=list)  # swap -> applied and verified, seconds
    refused: list[str] = field(default_factory=list)  # the reasons of those not applied
    dry: list[float] = field(default_factory=list)  # the dry runs' seconds
    dry_phases: list[Phases] = field(default_factory=list)  # where the dry runs' time went
    # where each applied change's time went (config-sync's own record), and before it: from the
    # swap to config-sync's pass (the kubelet-like swap seen, the debounce, the sources read)
    change_phases: list[Phases] = field(default_factory=list)


async def changes_through_config_sync(
    cluster: DevCluster, vol: AtomicVolume, base: dict[str, bytes], first: int, count: int, dry_run: bool
) -> Series:
    settings = Settings(
        http_address=("127.0.0.1", 0),  # a port of its own
        sources=(vol.path,),
        target=cluster.conf_path.parent,
        state_dir=cluster.dir / f"cs-{'dry' if dry_run else 'nodry'}",
        settle_seconds=0.0,
        plugin_dir=await cluster.plugin_dir(),
        dry_run=dry_run,
        dry_run_slurmctld=tuple(cluster.in_namespace("slurmctld")),  # this release's, in its chroot
    )
    registry = CollectorRegistry()
    client = cluster.client(metrics=SlurmMetrics(registry))
    out = Series()
    samples, refused = out.samples, out.refused
    async with running(settings, client=client, registry=registry) as r:
        svc = r.service
        if dry_run:
            await shadow_built(svc.validator.dry_runner)
        in_a_row = 0
        for i in range(first, first + count):
            files = with_max_time(base, i)
            want = sha_of(files)
            started = time.monotonic()
            vol.write(files)

            def judged(s: dict[str, Any], w: str = want) -> bool:
                return any(s[k] and s[k]["sha256"] == w for k in ("applied", "rejected")) and not s["pending"]

            try:
                st = await svc.wait_until(judged, CHANGE_SECONDS)
            except TimeoutError:
                st = {"applied": None, "rejected": {"reason": f"no outcome within {CHANGE_SECONDS:g}s"}}
            if st["applied"] and st["applied"]["sha256"] == want:
                samples.append(time.monotonic() - started)
                in_a_row = 0
            else:
                refused.append(str(st["rejected"]["reason"])[:300])
                in_a_row += 1
                if in_a_row >= GIVE_UP_AFTER:
                    break
            await asyncio.sleep(random.uniform(0.05, 0.3))  # not in lock-step with anything
        runner = svc.validator.dry_runner
        out.dry = list(runner.recent) if runner is not None else []
        out.dry_phases = list(runner.recent_phases) if runner is not None else []
        out.change_phases = [
            {**p, "before_ms": round(s * 1000) - (p["total_ms"] or 0)}
            for s, p in zip(samples, svc.record.recent_phases, strict=False)
        ]
    return out


async def shadow_built(runner: DryRunner | None) -> None:
    """Until config-sync has built the dry run's shadow of the state, once at its start (seconds at
    10,000 jobs; printed): the changes measured are the lone changes of a running config-sync, not
    one that waits for that first build."""
    deadline = time.monotonic() + CHANGE_SECONDS
    while runner is not None and runner.warmed_seconds is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the dry run's shadow of the state was not built within {CHANGE_SECONDS:g}s")
        await asyncio.sleep(0.1)
    if runner is not None:
        print(f"  the dry run's shadow: built in {runner.warmed_seconds:.1f}s when config-sync started")


CHANGE_PHASES = {
    "before_ms": "swap -> config-sync's pass",
    "validate_ms": "validation",
    "dry_run_ms": "  of it the dry run",
    "swap_ms": "swap",
    "reconfigure_ms": "scontrol reconfigure",
    "verify_ms": "verification",
}

PHASES = {
    "sync_ms": "shadow sync",
    "files_ms": "other files",
    "primary_ms": "spawn -> primary",
    "answering_ms": "-> answering",
    "verdict_ms": "-> verdict",
    "kill_ms": "kill",
    "cleanup_ms": "directory removed",
}


def phase_lines(phases: list[Phases], labels: dict[str, str] = PHASES) -> list[str]:
    """Where the time went, p50 / p99 of each phase in ms (DryRunResult.phases by default)."""
    out = []
    for key, label in labels.items():
        values = [float(v) for p in phases if (v := p.get(key)) is not None]
        if values:
            out.append(f"{label:<26} {statistics.median(values):6.0f} / {percentile(values, 99):6.0f} ms")
    return out


def cell(samples: list[float]) -> str:
    if not samples:
        return "none applied"
    return f"{statistics.median(samples):.3f} s / {percentile(samples, 99):.3f} s"


async def measure(
    release: Release, jobs: int, records: int, reach: str, changes: int, baseline_n: int
) -> None:
    spec = ClusterSpec(
        nodes=3, node_records={"DOWN": records}, record_reach=reach, max_job_count=max(20000, jobs * 2)
    )
    async with DevCluster(release, spec) as cluster:
        started = time.monotonic()
        await cluster.submit_held(jobs)
        filled = time.monotonic() - started
        base = base_files(cluster)
        vol = AtomicVolume(cluster.dir / "vol" / "cm")
        vol.write(base)
        bare = await bare_reconfigures(cluster, baseline_n)
        off = await changes_through_config_sync(cluster, vol, base, 100, changes, False)
        on = await changes_through_config_sync(cluster, vol, base, 200, changes, True)
    nodry, nodry_refused = off.samples, off.refused
    ours, refused, dry = on.samples, on.refused, on.dry
    size = f"3 nodes + {records} records ({reach}), {jobs} held jobs ({release.short})"
    print(f"\nP1-scale on {release}: {size}; {jobs} held jobs submitted in {filled:.1f}s")
    for label, s in (("bare scontrol reconfigure", bare), ("dry run off", nodry), ("dry run on", ours)):
        print(f"  {label:<28} n={len(s):<3} p50/p99 {cell(s)}" + (f"  max {max(s):.3f} s" if s else ""))
        print(f"    in order: {' '.join(f'{x:.2f}' for x in s)}")
    for label, why in (("dry run off", nodry_refused), ("dry run on", refused)):
        if why:
            print(f"  {label}: {len(why)} change(s) refused; first: {why[0]}")
    for label, series in (("dry run off", off), ("dry run on", on)):
        print(f"  where a change's time went, {label} (p50 / p99):")
        for line in phase_lines(series.change_phases, CHANGE_PHASES):
            print(f"    {line}")
    if dry:
        print(f"  the dry run alone: n={len(dry)} p50/p99 {cell(dry)}")
        for line in phase_lines(on.dry_phases):
            print(f"    {line}")
    # the first change after config-sync started, apart: beside Slurm's own first reconfigure of
    # this cluster (the bare series' first), the slowest of Slurm's own
    first, later = (ours[0], ours[1:]) if ours and not refused else (None, ours)
    slurm_first = bare[0] if bare else None
    if first is not None and slurm_first is not None:
        print(
            f"  the first change after config-sync started: {first:.3f} s; Slurm's own first "
            f"reconfigure of this cluster: {slurm_first:.3f} s; later changes p50/p99 {cell(later)}"
        )
        if on.change_phases:
            print("    where it went: " + ", ".join(f"{k} {v}" for k, v in on.change_phases[0].items()))
        if on.dry_phases:
            print("    its dry run: " + ", ".join(f"{k} {v}" for k, v in on.dry_phases[0].items()))
    met = bool(later) and not refused and percentile(later, 99) <= 1.0
    tag = "" if reach == "unreachable" else f"-{reach}"  # the goal's cluster has no tag
    result(
        f"P1-scale{tag}",
        f"..data swap -> applied and verified, dry run on, p50/p99 of the {len(later)} lone changes "
        f"after the first; {size}",
        cell(later) + (f" ({len(refused)} refused)" if refused else ""),
        f"{cell(bare)} (bare scontrol reconfigure, unverified)",
        "p99 <= 1 s",
        met,
    )
    if first is not None and slurm_first is not None:
        result(
            f"P1-scale-first{tag}",
            "the first change after config-sync started (its dry run's state built at start, in the "
            f"background), swap -> applied and verified; {size}",
            f"{first:.3f} s",
            f"{slurm_first:.3f} s (Slurm's own first scontrol reconfigure of this cluster)",
            "<= Slurm's first reconfigure + 0.5 s",
            first <= slurm_first + 0.5,
        )
    result(
        f"P1-scale-verify{tag}",
        f"the same with the dry run off: the verification at size alone ({release.short}, {jobs} jobs)",
        cell(nodry) + (f" ({len(nodry_refused)} refused)" if nodry_refused else ""),
        f"{cell(bare)} (bare scontrol reconfigure)",
        "p99 <= 1 s",
        bool(nodry) and not nodry_refused and percentile(nodry, 99) <= 1.0,
    )
    if dry:
        result(
            f"P1-scale-dry{tag}",
            f"the dry run's own cost at {jobs} jobs ({release.short})",
            cell(dry),
            "none (the field has no dry run)",
            "inside P1-scale's p99 <= 1 s",
            percentile(dry, 99) <= 1.0,
        )


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--release", choices=["host", "chroot", "sid", "both"], default="both")
    p.add_argument("--changes", type=int, default=20)
    p.add_argument("--baseline", type=int, default=20, help="bare reconfigures")
    p.add_argument("--jobs", default="10000", help="comma-separated: one cluster per count")
    p.add_argument("--records", type=int, default=1000)
    p.add_argument(
        "--reach", default="unreachable,refused", help="comma-separated: how messages to the records end"
    )
    args = p.parse_args()
    logs.configure(json=False, level="error")
    for release in await releases(args.release):
        for jobs in (int(j) for j in args.jobs.split(",")):
            for reach in args.reach.split(","):
                await measure(release, jobs, args.records, reach, args.changes, args.baseline)


if __name__ == "__main__":
    asyncio.run(main())
