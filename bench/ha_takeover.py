"""HA1 and HA2: config-sync beside two controllers (one pod each, `--peer` the other), real Slurm.

Run: `.venv/bin/python bench/ha_takeover.py [--release host|chroot|sid] [--changes 20] [--baseline-changes 5]`

- HA1: the primary's slurmctld is killed (SIGKILL, a pod lost with its node) and a change is written
  at the same instant; measured from the kill to the change applied on the backup, beside Slurm's
  own takeover (the kill to the backup in control), in the same run.
- HA2: `--changes` changes, each with a move of control at a random instant of its apply (0 to 8 s
  after the ..data swap): `scontrol takeover` when the primary is in control, else the primary
  started again (it takes control back). After each: are both pods on one set (their files and
  what they report; a timeout of 120 s counts as split), is the long job still running since the
  same start, and was the change applied or refused with a reason. The baseline: two config-syncs
  without `--peer` (each applying on its own, as two unaware sidecars would), `--baseline-changes`
  rounds of the same.

Settings are the tests' quick ones (settle 0.2 s, poll 0.2 s): the figures are about the moves of
control, not about waiting out production's periods.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _report import each_release, result

from sidecars.devcluster import DevCluster, Release

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the pair is run as the tests run it
from tests.configsync.hapair import Pair, ha_pair, ha_spec, with_min_job_age  # noqa: E402
from tests.configsync.harness import set_sha  # noqa: E402

WINDOW_SECONDS = 8.0  # a change's apply on this machine: validation, swap, reconfigure, verification
SETTLE_WITHIN = 120.0


@dataclass
class Rounds:
    applied: int = 0
    refused: list[str] = field(default_factory=list)  # the reasons given
    split: list[str] = field(default_factory=list)
    unexplained: int = 0  # neither applied nor refused with a reason
    jobs_lost: int = 0
    seconds: list[float] = field(default_factory=list)


async def ha1(release: Release) -> tuple[float, float, float]:
    """(Slurm's takeover, our first change applied on the backup, that change counted applied on
    every controller pod), each from the kill, in seconds. The killed primary's pod keeps its
    config-sync, which stages the set for its slurmctld's next start: only then is it applied."""
    async with DevCluster(release, ha_spec()) as cluster, ha_pair(cluster) as pair:
        b = pair.pods["ctld-b"]
        files = with_min_job_age(pair.good(), 123)
        sha = set_sha(files)
        await cluster.kill_controller("ctld-a")
        killed = time.monotonic()
        pair.config.write(files)
        await cluster.wait_primary("ctld-b", timeout=60)
        slurm = time.monotonic() - killed
        await b.service.wait_until(
            lambda st: bool(st["applied"] and st["applied"]["sha256"] == sha and st["ha"]["writer"]), 60
        )
        ours = time.monotonic() - killed
        await b.service.wait_until(
            lambda st: bool(st["applied"]["sha256"] == sha and st["applied"]["outcome"] == "applied"), 60
        )
        return slurm, ours, time.monotonic() - killed


async def move_control(cluster: DevCluster) -> None:
    """Control to the other controller: a takeover, or the primary back (it takes control again)."""
    if await cluster.primary() == "ctld-a":
        await cluster.takeover()
    else:
        # the takeover shut ctld-a down; it may still be saving its state and holding its port
        deadline = time.monotonic() + 60
        while cluster.controller_pid("ctld-a") is not None:
            if time.monotonic() > deadline:
                raise RuntimeError("ctld-a did not end within 60 s of being shut down by a takeover")
            await asyncio.sleep(0.1)
        await cluster.start_controller("ctld-a")
        await cluster.wait_primary("ctld-a", timeout=90)


async def settled_naive(pair: Pair) -> str | None:
    """Without --peer: both pods done, holding the same set on disk (None: split at the deadline)."""
    deadline = time.monotonic() + SETTLE_WITHIN
    while time.monotonic() < deadline:
        states = [p.service.status() for p in pair.pods.values()]
        shas = {p.target_sha() for p in pair.pods.values()}
        if not any(st["pending"] for st in states) and len(shas) == 1:
            return shas.pop()
        await asyncio.sleep(0.1)
    return None


async def ha2(release: Release, changes: int, rng: random.Random, *, peers: bool) -> Rounds:
    out = Rounds()
    overrides: dict[str, Any] = {} if peers else {"peers": ()}
    async with DevCluster(release, ha_spec()) as cluster, ha_pair(cluster, **overrides) as pair:
        job = await cluster.sbatch("-N", "1", wrap="sleep 3600")
        start = (await cluster.wait_job(job, "RUNNING", timeout=30)).start_time
        await cluster.job_state_saved(job)  # a backup recovers only what was saved
        files = pair.good()
        for i in range(changes):
            old_sha = set_sha(files)
            files = with_min_job_age(files, 300 + i)
            sha = set_sha(files)
            t0 = time.monotonic()
            pair.config.write(files)
            await asyncio.sleep(rng.uniform(0, WINDOW_SECONDS))  # the random instant of the move
            await move_control(cluster)
            if peers:
                try:
                    got: str | None = await pair.one_set(SETTLE_WITHIN)
                except AssertionError as e:
                    got = None
                    out.split.append(f"change {i}: {e}"[:300])
            else:
                got = await settled_naive(pair)
                if got is None:
                    out.split.append(f"change {i}: the pods' directories differ")
            out.seconds.append(time.monotonic() - t0)
            reasons = [
                st["rejected"]["reason"]
                for st in (p.service.status() for p in pair.pods.values())
                if st["rejected"] and st["rejected"]["sha256"] == sha and st["rejected"]["reason"]
            ]
            if got == sha:
                out.applied += 1
            elif got == old_sha and reasons:
                out.refused.append(reasons[0])
            elif got is not None:
                out.unexplained += 1
            jobs = {j.job_id: j for j in await cluster.client().jobs()}
            if job not in jobs or jobs[job].state != "RUNNING" or jobs[job].start_time != start:
                out.jobs_lost += 1
                job = await cluster.sbatch("-N", "1", wrap="sleep 3600")  # keep one running job to lose
                start = (await cluster.wait_job(job, "RUNNING", timeout=60)).start_time
            print(
                f"  change {i + 1}/{changes}: {'one set' if got else 'SPLIT'}"
                f" ({'new' if got == sha else 'last known good' if got == old_sha else got}),"
                f" {out.seconds[-1]:.1f} s",
                flush=True,
            )
    return out


async def measure(release: Release, args: argparse.Namespace) -> None:
    slurm, ours, everywhere = await ha1(release)
    print(
        f"HA1 ({release}): Slurm's takeover {slurm:.1f} s, first change applied on the backup {ours:.1f} s,"
        f" counted applied on every controller pod {everywhere:.1f} s"
    )
    result(
        "HA1",
        f"killed primary -> first change applied on the backup ({release.short})",
        f"{ours:.1f} s",
        f"Slurm's own takeover {slurm:.1f} s",
        "within 5 s of Slurm's takeover",
        ours - slurm <= 5.0,
    )
    rng = random.Random(args.seed)
    print(f"HA2 ({release}): {args.changes} changes, a move of control at a random instant of each")
    ours2 = await ha2(release, args.changes, rng, peers=True)
    print(f"HA2 baseline: {args.baseline_changes} changes, two config-syncs without --peer")
    base = await ha2(release, args.baseline_changes, rng, peers=False) if args.baseline_changes else None
    explained = ours2.applied + len(ours2.refused)
    ok = not ours2.split and not ours2.jobs_lost and explained == args.changes
    baseline = (
        "not run"
        if base is None
        else f"without --peer, {args.baseline_changes} changes: {len(base.split)} split,"
        f" {base.jobs_lost} jobs lost, {base.applied} applied, {len(base.refused)} refused"
        f" (rolled back), {base.unexplained} lost without a reason"
    )
    result(
        "HA2",
        f"{args.changes} changes with a takeover at a random instant ({release.short})",
        f"{len(ours2.split)} split, {ours2.jobs_lost} jobs lost, {ours2.applied} applied,"
        f" {len(ours2.refused)} refused with a reason",
        baseline,
        "0 split, 0 jobs lost, each applied or refused with a reason",
        ok,
    )
    for line in ours2.split:
        print(f"  split: {line}")
    for why in ours2.refused:
        print(f"  refused: {why}")


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--release", choices=("host", "chroot", "sid"), default="chroot")
    p.add_argument("--changes", type=int, default=20)
    p.add_argument("--baseline-changes", type=int, default=5)
    p.add_argument("--seed", type=int, default=22)
    await each_release(p.parse_args(), measure)


if __name__ == "__main__":
    asyncio.run(main())
