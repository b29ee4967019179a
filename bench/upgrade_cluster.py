"""U1: a whole-cluster Slurm upgrade 24.11 -> 26.05 of a cluster with running jobs, on real daemons.

Every run starts alike: a dev cluster of 24.11 with accounting (MariaDB + slurmdbd), 3 workers of
2 CPUs, 6 running jobs (each runs until the bench says "go") and held pending jobs up to `--jobs`
in all (10 submitted one by one, the rest in bulk: a busy cluster's queue). Each size in `--jobs`
is measured `--runs` times; the figures are the median of the runs.

- ours: the control plane's stage machine (sidecars/controlplane/changes/cluster_upgrade.py) with the
  dev cluster's roles: preflight, slurmdbd (backup, then the new one), slurmctld (state copy, the new
  one on the same state, verified), the workers one at a time, drained first. "go" is given when the
  workers' stage starts (the roll waits for the jobs, as it does in production).
- naive: what a naive image bump of every role at once does: every daemon stopped together, the
  worker pods' processes (slurmd, slurmstepd, the jobs) gone with their pods, then every daemon of
  the new release started together. "go" is given once the cluster answers again.
- the fair baseline of slurmctld's gap: on a third cluster whose slurmdbd was moved first (and took
  the records slurmctld held for it, as ours waits for), the 24.11 slurmctld stopped and the 26.05
  one started on the same state, nothing else (no copy, no verification). It pays what Slurm itself
  pays to start a newer release on an older state.
- Slurm's own restart (the goal's reference): the median of three restarts of the 26.05 slurmctld on
  the upgraded cluster (that release on its own state); 24.11's before the upgrade printed beside.

slurmctld's gap is the longest stretch `scontrol ping` got no answer (polled every 50 ms). For ours,
the fair baseline and the reference, a timeline splits it: the stop (the old controller saving its
state and exiting), our state copy, the new controller's start (its log: started, jobs recovered,
primary) and its first answer; seen from the bench's own marks and slurmctld's log. Goal: 0 jobs
lost; slurmctld unanswered for less than 2x Slurm's own restart.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import re
import signal
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from _report import result

from sidecars.controlplane.changes.cluster_upgrade.queue import ACCOUNTING_QUEUE_SETTLED
from sidecars.controlplane.changes.cluster_upgrade.stages import ClusterUpgrade
from sidecars.devcluster import ClusterSpec, Release
from sidecars.devcluster.release import build_chroot
from sidecars.devcluster.swap import SwappableCluster
from sidecars.devcluster.swap_roles import DevClusterRoles
from sidecars.runtime import logs
from sidecars.slurm import Version

IMAGES = {"slurmdbd": "sid", "slurmctld": "sid", "slurmd": "sid"}
POLL_SECONDS = 0.05
RUNNING, PENDING = 6, 10  # the cluster has 6 CPUs; 10 held jobs submitted one by one
# slurmctld's log lines that mark its start, in order: (mark, what the line starts with)
CTLD_LINES = (
    ("ctld started", "slurmctld version "),
    ("ctld jobs recovered", "Recovered information about "),
    ("ctld primary", "Running as primary controller"),
)
# the gap's parts: (name, from mark, to mark); a part whose marks are missing is not shown
PARTS = (
    ("stop: old controller saves its state and exits", "stop asked", "stopped"),
    ("our state copy (what changed since the pre-copy)", "copy begin", "copy end"),
    ("start asked -> new controller's first log line", "start asked", "ctld started"),
    ("new controller reads the state (jobs recovered)", "ctld started", "ctld jobs recovered"),
    ("... -> running as primary", "ctld jobs recovered", "ctld primary"),
    ("primary -> first answer to the bench's ping", "ctld primary", "answered"),
    ("gap seen by the bench's ping", "unanswered", "answered"),
    ("first answer -> every job and node verified", "answered", "verified"),
)
QUEUED = "records queued for slurmdbd at the stop (count)"


class Marks:
    """Named moments (epoch seconds, to line up with slurmctld's log); the first of each name kept."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self.queued: int | None = None  # records slurmctld held for slurmdbd when asked to stop

    def mark(self, name: str) -> None:
        self.at.setdefault(name, time.time())

    def from_log(self, log: Path, since: float) -> None:
        """slurmctld's start lines written after `since` (its log's time is local, as time.time's)."""
        with contextlib.suppress(OSError), log.open(errors="replace") as f:
            for line in f:
                m = re.match(r"\[([0-9T:.-]+)\] (.*)", line)
                if not m:
                    continue
                when = datetime.datetime.fromisoformat(m.group(1)).timestamp()
                if when < since:
                    continue
                for name, start in CTLD_LINES:
                    if m.group(2).startswith(start) and name not in self.at:
                        self.at[name] = when

    def parts(self) -> dict[str, float]:
        found = {p: self.at[b] - self.at[a] for p, a, b in PARTS if a in self.at and b in self.at}
        if self.queued is not None:
            found[QUEUED] = float(self.queued)
        return found


class TimedCluster(SwappableCluster):
    """A `SwappableCluster` that marks its controller's stop and start in `marks` (when set), and
    the records it held for slurmdbd when asked to stop (its new release sends them before it
    answers)."""

    marks: Marks | None = None

    def _mark(self, name: str) -> None:
        if self.marks is not None:
            self.marks.mark(name)

    async def stop_slurmctld(self, *, crash: bool = False, timeout: float = 30.0) -> None:
        if self.marks is not None and not crash:
            self.marks.queued = await self.client(timeout=10.0).accounting_queue()
        self._mark("stop asked")
        await super().stop_slurmctld(crash=crash, timeout=timeout)
        self._mark("stopped")

    async def start_slurmctld(self, timeout: float = 30.0) -> None:
        self._mark("start asked")
        await super().start_slurmctld(timeout=timeout)


class TimedRoles(DevClusterRoles):
    """The dev roles with the state copy after the stop marked."""

    marks: Marks | None = None

    async def copy_state(self) -> str:
        if self.marks is not None:
            self.marks.mark("copy begin")
        try:
            return await super().copy_state()
        finally:
            if self.marks is not None:
                self.marks.mark("copy end")


class Unanswered:
    """Polls `scontrol ping` and keeps the longest stretch without an answer (and its ends, marked)."""

    def __init__(self, cluster: SwappableCluster, marks: Marks | None = None) -> None:
        self.cluster = cluster
        self.marks = marks
        self.longest = 0.0
        self._since: float | None = None

    async def watch(self) -> None:
        while True:
            try:
                up = (await self.cluster.client(timeout=2.0).ping()).up
            except Exception:  # a shim of a daemon being swapped: not an answer either
                up = False
            now = time.monotonic()
            if up and self._since is not None:
                if now - self._since > self.longest and self.marks is not None:
                    self.marks.at["answered"] = time.time()
                    self.marks.at["unanswered"] = self.marks.at["answered"] - (now - self._since)
                self.longest = max(self.longest, now - self._since)
                self._since = None
            elif not up and self._since is None:
                self._since = now
            await asyncio.sleep(POLL_SECONDS)

    @contextlib.asynccontextmanager
    async def watching(self):  # type: ignore[no-untyped-def]
        self.longest, self._since = 0.0, None
        task = asyncio.create_task(self.watch(), name="bench-u1-ping")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _spec(jobs: int) -> ClusterSpec:
    return ClusterSpec(
        nodes=3, cpus=2, accounting=True, foreground_ctld=True, max_job_count=max(10_000, 2 * jobs)
    )


async def prepare(c: SwappableCluster, jobs: int) -> tuple[list[int], list[int]]:
    """RUNNING running jobs (until "go"), then held jobs up to `jobs` in all."""
    go = c.out_dir / "go"
    running = [await c.sbatch(wrap=f"while [ ! -e {go} ]; do sleep 0.2; done") for _ in range(RUNNING)]
    for j in running:
        await c.wait_job(j, "RUNNING", timeout=60)
    held = [await c.sbatch("--hold", wrap="true") for _ in range(min(PENDING, jobs - RUNNING))]
    held += await c.submit_held(jobs - RUNNING - len(held))  # a larger state: a busy cluster's queue
    return running, held


async def restart_reference(c: TimedCluster, times: int = 3) -> tuple[float, dict[str, float]]:
    """Slurm's own restart: the controller stopped and started again on the release it runs (the
    median of `times`: one restart on a shared machine is noise), and the parts of the median one."""
    runs = []
    for _ in range(times):
        marks = Marks()
        began = time.time()
        watch = Unanswered(c, marks)
        c.marks = marks
        async with watch.watching():
            await c.restart_slurmctld()
            await asyncio.sleep(POLL_SECONDS * 4)  # the poll's next answer closes the stretch
        c.marks = None
        marks.from_log(c.log_dir / "slurmctld.log", began)
        runs.append((watch.longest, marks.parts()))
    runs.sort(key=lambda r: r[0])
    return runs[len(runs) // 2]


async def lost(c: SwappableCluster, running: list[int], held: list[int]) -> int:
    """Jobs of before that did not end COMPLETED (the running ones) or vanished (the held ones)."""
    (c.out_dir / "go").touch()
    client = c.client(timeout=60.0)  # thousands of jobs listed on a loaded machine
    # a job alive ends within a second of "go"; a killed one may be listed RUNNING for minutes
    # (until slurmctld notices its node lost it): 30 s, then whatever is not COMPLETED is lost
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        jobs = {j.job_id: j.state for j in await client.jobs()}
        if not any(jobs.get(j) in ("RUNNING", "COMPLETING", "PENDING") for j in running):
            break
        await asyncio.sleep(0.2)
    jobs = {j.job_id: j.state for j in await client.jobs()}
    # a job of before that slurmctld no longer lists (its state lost), or listed as ended otherwise
    gone = [j for j in running if jobs.get(j) != "COMPLETED"]
    vanished = [j for j in held if j not in jobs]
    return len(gone) + len(vanished)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""  # ended while looked at


def _descendants(roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    found, todo = set(roots), list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


async def naive(c: SwappableCluster, new: Release) -> dict[str, float]:
    """Every role's image bumped at once: all stopped together (the worker pods' processes with
    them), then all of the new release started together."""
    began = time.monotonic()
    pods = {p for p in c.processes() if _comm(p) in ("slurmd", "slurmstepd")}
    for pid in _descendants(pods):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    await asyncio.gather(c.stop_slurmctld(), c.stop_slurmdbd())
    stopped = time.monotonic()
    for name in c.node_names:
        c.releases[f"slurmd-{name}"] = new
    c.releases["slurmdbd"] = new

    async def workers() -> None:
        await asyncio.gather(*(c.start_slurmd(n) for n in c.node_names))

    await asyncio.gather(c.start_slurmdbd(timeout=180), c.start_slurmctld_of(new), workers())
    await c.wait_nodes(lambda ns: all(n.state.registered for n in ns), timeout=120, what="every worker back")
    return {"stop": stopped - began, "start": time.monotonic() - stopped}


@dataclass
class Ours:
    final: str
    total: float
    stages: dict[str, float]
    gap: float
    machine: float  # the stage machine's own count: stop to every job and node verified
    lost: int
    parts: dict[str, float]
    ref_old: float  # 24.11's own restart, before the upgrade
    ref_new: float  # 26.05's own restart, after it: the goal's reference
    ref_parts: dict[str, float]


@dataclass
class Fair:
    gap: float
    parts: dict[str, float]
    lost: int


@dataclass
class Naive:
    gap: float
    total: float
    stop: float
    start: float
    lost: int


async def ours(old: Release, new: Release, jobs: int) -> Ours:
    c = TimedCluster(old, _spec(jobs))
    async with c:
        running, held = await prepare(c, jobs)
        ref_old, _ = await restart_reference(c)
        roles = TimedRoles(c, {"chroot": old, "sid": new})
        marks = Marks()

        async def emit(stage: str, state: str, message: str) -> None:
            if (stage, state) == ("slurmctld", "running"):
                c.marks = roles.marks = marks
            if stage == "slurmctld" and state in ("done", "failed", "rolled_back"):
                marks.mark("verified")
                c.marks = roles.marks = None
            if (stage, state) == ("workers", "running"):
                (c.out_dir / "go").touch()

        up = ClusterUpgrade(roles, Version.parse(new.version), IMAGES, emit=emit)
        watch = Unanswered(c, marks)
        began = time.time()
        async with watch.watching():
            t0 = time.monotonic()
            final = await up.run()
            total = time.monotonic() - t0
        marks.from_log(c.log_dir / "slurmctld.log", began)
        n_lost = await lost(c, running, held)
        ref_new, ref_parts = await restart_reference(c)  # 26.05's own restart, on the upgraded cluster
    return Ours(
        final=final,
        total=total,
        stages={s.name: s.seconds or 0.0 for s in up.status.stages},
        gap=watch.longest,
        machine=up.status.slurmctld_unanswered_seconds or 0.0,
        lost=n_lost,
        parts=marks.parts(),
        ref_old=ref_old,
        ref_new=ref_new,
        ref_parts=ref_parts,
    )


async def fair(old: Release, new: Release, jobs: int) -> Fair:
    """The new release's slurmctld started on the old one's state, as a bare restart does it."""
    c = TimedCluster(old, _spec(jobs))
    async with c:
        running, held = await prepare(c, jobs)
        await c.swap_slurmdbd(new)  # slurmdbd first, as in ours: not timed
        # and its records taken, as ours waits for: what remains is what the conversion costs
        deadline = time.monotonic() + 600
        while await c.client(timeout=10.0).accounting_queue() > ACCOUNTING_QUEUE_SETTLED:
            if time.monotonic() > deadline:
                raise RuntimeError("slurmdbd did not take slurmctld's records within 600 s")
            await asyncio.sleep(0.5)
        marks = Marks()
        c.marks = marks
        watch = Unanswered(c, marks)
        began = time.time()
        async with watch.watching():
            await c.swap_slurmctld(new)
            await asyncio.sleep(POLL_SECONDS * 4)  # the poll's next answer closes the stretch
        c.marks = None
        marks.from_log(c.log_dir / "slurmctld.log", began)
        n_lost = await lost(c, running, held)
    return Fair(gap=watch.longest, parts=marks.parts(), lost=n_lost)


async def everything(old: Release, new: Release, jobs: int) -> Naive:
    async with SwappableCluster(old, _spec(jobs)) as c:
        running, held = await prepare(c, jobs)
        watch = Unanswered(c)
        async with watch.watching():
            began = time.monotonic()
            phases = await naive(c, new)
            total = time.monotonic() - began
        n_lost = await lost(c, running, held)
    return Naive(gap=watch.longest, total=total, stop=phases["stop"], start=phases["start"], lost=n_lost)


def _p50(values: Iterable[float]) -> float:
    return statistics.median(values)


def _p50_parts(found: Sequence[dict[str, float]]) -> dict[str, float]:
    names = [n for n, _, _ in PARTS] + [QUEUED]
    return {n: _p50(d[n] for d in found if n in d) for n in names if any(n in d for d in found)}


def _runs(values: Iterable[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def report(jobs: int, o: list[Ours], f: list[Fair], e: list[Naive]) -> None:
    gap, ref, fair_gap = _p50(r.gap for r in o), _p50(r.ref_new for r in o), _p50(r.gap for r in f)
    naive_gap = _p50(r.gap for r in e)
    lost_o, lost_f, lost_e = max(r.lost for r in o), max(r.lost for r in f), max(r.lost for r in e)
    stages = {k: _p50(r.stages[k] for r in o) for k in o[0].stages}
    finals = sorted({r.final for r in o})
    said = ", ".join(f"{k} {v:.1f} s" for k, v in stages.items())
    print(f"\n== {jobs} jobs ({RUNNING} running, {jobs - RUNNING} held), median of {len(o)} runs")
    print(
        f"ours: {'/'.join(finals)} in {_p50(r.total for r in o):.1f} s; {said}; slurmctld unanswered "
        f"{gap:.2f} s (runs: {_runs(r.gap for r in o)}); the machine's own count, stop to verified: "
        f"{_p50(r.machine for r in o):.2f} s; {lost_o} jobs lost (worst run)"
    )
    print(
        f"fair baseline (26.05 started on 24.11's state, nothing else): unanswered {fair_gap:.2f} s "
        f"(runs: {_runs(r.gap for r in f)}); {lost_f} jobs lost"
    )
    print(
        f"naive (all stopped, all started): {_p50(r.total for r in e):.1f} s (stop "
        f"{_p50(r.stop for r in e):.1f} s, start {_p50(r.start for r in e):.1f} s); slurmctld "
        f"unanswered {naive_gap:.2f} s (runs: {_runs(r.gap for r in e)}); {lost_e} jobs lost"
    )
    print(
        f"Slurm's own restart of slurmctld (median of 3 per run): 26.05 {ref:.2f} s "
        f"(runs: {_runs(r.ref_new for r in o)}), 24.11 {_p50(r.ref_old for r in o):.2f} s"
    )
    cols = (
        ("ours", _p50_parts([r.parts for r in o])),
        ("fair", _p50_parts([r.parts for r in f])),
        ("restart", _p50_parts([r.ref_parts for r in o])),
    )
    print(f"  {'where the gap goes (seconds, median of runs)':<52}" + "".join(f"{n:>9}" for n, _ in cols))
    for name in [*(n for n, _, _ in PARTS), QUEUED]:
        form = "9.0f" if name == QUEUED else "9.3f"
        print(f"  {name:<52}" + "".join(f"{d[name]:{form}}" if name in d else f"{'-':>9}" for _, d in cols))
    result(
        "U1" if jobs <= RUNNING + PENDING else f"U1-{jobs}",
        f"upgrade 24.11 -> 26.05, {RUNNING} running + {jobs - RUNNING} pending jobs: "
        f"jobs lost, slurmctld unanswered (median of {len(o)})",
        f"{lost_o} lost, unanswered {gap:.2f} s; stages {said}",
        f"naive: {lost_e} lost, unanswered {naive_gap:.2f} s; 26.05 alone on 24.11's state: "
        f"unanswered {fair_gap:.2f} s",
        f"0 lost, unanswered < 2x Slurm's own restart (26.05: {ref:.2f} s)",
        finals == ["complete"] and lost_o == 0 and gap < 2 * ref,
    )


async def measure(old: Release, new: Release, jobs: int, runs: int) -> None:
    o: list[Ours] = []
    f: list[Fair] = []
    e: list[Naive] = []
    for i in range(runs):  # interleaved: the machine's load falls on the three alike
        o.append(await ours(old, new, jobs))
        f.append(await fair(old, new, jobs))
        e.append(await everything(old, new, jobs))
        print(
            f"  {jobs} jobs, run {i + 1}: slurmctld unanswered: ours {o[-1].gap:.2f} s, fair baseline "
            f"{f[-1].gap:.2f} s, naive {e[-1].gap:.2f} s, 26.05's own restart {o[-1].ref_new:.2f} s",
            flush=True,
        )
        # each run's own split: an outlier's cause is in its run, not in the medians
        print("    ours: " + "; ".join(f"{k} {v:.3f}" for k, v in o[-1].parts.items()), flush=True)
    report(jobs, o, f, e)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--jobs",
        type=int,
        nargs="+",
        default=[16, 3016],
        help=f"jobs before the upgrade, one size or several ({RUNNING} running, the rest held)",
    )
    p.add_argument("--runs", type=int, default=3, help="runs per size; the figures are their median")
    args = p.parse_args()
    if min(args.jobs) <= RUNNING or args.runs < 1:
        p.error(f"--jobs must each exceed the {RUNNING} running jobs, and --runs be 1 or more")
    logs.configure(json=False, level="warning")

    async def go() -> None:
        old, new = await build_chroot(name="chroot"), await build_chroot(name="sid")
        for jobs in args.jobs:
            await measure(old, new, jobs, args.runs)

    asyncio.run(go())


if __name__ == "__main__":
    main()
