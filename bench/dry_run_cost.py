"""The dry run's own cost, and how it grows with the jobs in the state: 1,000, 10,000, 50,000.

Run: `.venv/bin/python bench/dry_run_cost.py [--release host|chroot|sid] [--jobs 1000,10000,50000]
[--runs 5] [--baseline-runs 1]` (22.05 on the host by default: filling 50,000 held jobs takes about two
minutes a release, the old copy of them more than one; about 7 minutes in all).

One dev cluster holds, in turn, each count of held batch jobs (individual jobs, not arrays). At each,
a harmless set is dry-run --runs times, as config-sync does it (the shadow of the state kept in step,
sidecars/configsync/dryrun/shadow.py), after one run that builds the shadow; beside it, in the same run, two
baselines: the shadow listed in full at each sync (every hash directory listed and every state file
copied, as before it trusted mtimes), and the copy every dry run made before (each job's hash.N/job.M/
re-created with empty files, the state files copied, and removed after). Printed: the median seconds
of a whole dry run, and of preparing its state alone (what the shadow is there to keep flat), and
where each dry run's time went; the rest is slurmctld loading the jobs, which no preparation of the
files can save.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import time
from pathlib import Path

from _report import result
from config_at_size import phase_lines

from sidecars.configsync.dryrun.runner import DryRunner
from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.sources import FileEntry, FileSet
from sidecars.devcluster import ClusterSpec, DevCluster
from sidecars.devcluster.release import release_named
from sidecars.runtime import logs

GOAL_PREP_SECONDS = 0.2  # preparing the state must stay below this at every size


def old_copy(live: Path, dest: Path) -> None:
    """The state as every dry run prepared it before the shadow (the baseline): the state files
    copied, every job's directory re-created with empty files."""
    dest.mkdir(mode=0o700)
    for e in os.scandir(live):
        with contextlib.suppress(OSError):
            if e.is_file(follow_symlinks=False):
                shutil.copy2(e.path, dest / e.name)
            elif e.is_dir(follow_symlinks=False) and e.name.startswith("hash."):
                for root, _dirs, names in os.walk(e.path):
                    here = dest / os.path.relpath(root, live)
                    here.mkdir(exist_ok=True)
                    for name in names:
                        (here / name).touch()


class Timed(DryRunner):
    """A dry run as config-sync runs it, with the seconds its state preparation took."""

    prep: list[float]

    def prepare_state(self, live_state: Path | None, state: Path) -> None:
        started = time.monotonic()
        super().prepare_state(live_state, state)
        self.prep.append(time.monotonic() - started)


class FullSync(Timed):
    """The shadow as it was before it trusted mtimes: every hash directory listed and every state
    file copied at each sync (what a change paid for the state, growing with the jobs)."""

    def prepare_state(self, live_state: Path | None, state: Path) -> None:
        if self.shadow is not None:
            self.shadow.trust_mtimes = False
        super().prepare_state(live_state, state)


class OldCopy(Timed):
    """The baseline: a fresh copy of the state in each dry run's own directory."""

    def state_path(self, live_state: Path | None, d: Path) -> Path:
        return d / "state"

    def prepare_state(self, live_state: Path | None, state: Path) -> None:
        started = time.monotonic()
        assert live_state is not None
        old_copy(live_state, state)
        self.prep.append(time.monotonic() - started)


def fileset(cluster: DevCluster) -> FileSet:
    etc = cluster.conf_path.parent
    data = (etc / "slurm.conf").read_bytes() + b"# a harmless change\n"
    return FileSet.build([FileEntry("slurm.conf", data, 0o644, len(data), Path("/"))])


async def saved_after(cluster: DevCluster, moment: float) -> None:
    """Until slurmctld saved its job state after `moment` (the dry run loads only what is saved)."""
    state = cluster.dir / "state" / "job_state"
    deadline = time.monotonic() + 120
    while not (state.exists() and state.stat().st_mtime > moment):
        if time.monotonic() > deadline:
            raise TimeoutError("slurmctld did not save its job state within 120 s")
        await asyncio.sleep(0.2)


async def measure(cls: type[Timed], cluster: DevCluster, runs: int, warm: bool) -> tuple[float, float]:
    """(median seconds of a dry run, median seconds of its state preparation); where its time went
    is printed."""
    runner = cls(
        command=cluster.in_namespace("slurmctld"),
        work_dir=cluster.dir / f"bench-{cls.__name__.lower()}",
        target=cluster.conf_path.parent,
        timeout=120.0,
    )
    runner.prep = []
    files = fileset(cluster)
    current = conffile.parse(files, "slurm.conf", cluster.conf_path.parent)
    if warm:
        first = await runner.run(files, current)  # builds the shadow: once per config-sync
        print(f"   {cls.__name__}: first run {first.seconds:.2f} s (state {runner.prep[-1]:.2f} s)")
    totals, preps = [], []
    for _ in range(runs):
        runner.prep = []
        r = await runner.run(files, current)
        if not r.ok:
            raise RuntimeError(f"the dry run refused a harmless set: {r.reason}")
        totals.append(r.seconds)
        preps.append(runner.prep[-1])
    shutil.rmtree(runner.shadow_path, ignore_errors=True)
    if runs:
        print(
            f"   {cls.__name__}, p50 / p99 of {runs}: "
            + "; ".join(phase_lines(list(runner.recent_phases)[-runs:]))
        )
    return statistics.median(totals), statistics.median(preps)


async def main(args: argparse.Namespace) -> int:
    logs.configure(json=False, level="warning")
    release = await release_named(args.release)
    counts = sorted(int(n) for n in args.jobs.split(","))
    spec = ClusterSpec(nodes=1, max_job_count=counts[-1] + 1000)
    met_all = True
    async with DevCluster(release, spec) as cluster:
        held = 0
        for n in counts:
            started = time.monotonic()
            await cluster.submit_held(n - held)
            held = n
            await saved_after(cluster, time.time())  # a save with every job in it
            print(
                f"== {release.short}: {n} held jobs in the state "
                f"(filled in {time.monotonic() - started:.0f} s)"
            )
            ours, ours_prep = await measure(Timed, cluster, args.runs, warm=True)
            full, full_prep = await measure(FullSync, cluster, args.runs, warm=True)
            base, base_prep = (
                await measure(OldCopy, cluster, args.baseline_runs, warm=False)
                if args.baseline_runs
                else (float("nan"), float("nan"))
            )
            met = ours_prep <= GOAL_PREP_SECONDS
            met_all &= met
            result(
                f"DRYRUN-{n // 1000}k",
                f"dry run at {n:,} jobs on {release.short}: whole (state prep)",
                f"{ours:.2f} s ({ours_prep:.3f} s)",
                f"shadow listed in full: {full:.2f} s ({full_prep:.3f} s); "
                f"old copy: {base:.2f} s ({base_prep:.3f} s)",
                f"state prep <= {GOAL_PREP_SECONDS} s",
                met,
            )
    return 0 if met_all else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--release", default="host", choices=["host", "chroot", "sid"])
    p.add_argument("--jobs", default="1000,10000,50000")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument(
        "--baseline-runs", type=int, default=1, help="the old copy: 80 s a run at 50,000 jobs (0: not run)"
    )
    raise SystemExit(asyncio.run(main(p.parse_args())))
