"""P1 and P1b: how fast a ConfigMap change reaches slurmctld, verified, against what the field runs.

Run: `.venv/bin/python bench/config_latency.py [--release host|chroot] [--changes 30] [--baseline 6]`

P1  From the kubelet's `..data` swap to "verified", over --changes changes (partition MaxTime), on a
    real local Slurm. "Verified" here is: the set validated (our checks and Slurm's own parser), swapped
    into the target, `scontrol reconfigure` answered, slurmctld answered a ping, the new MaxTime is what
    `scontrol show partition` reports and no node went DOWN. The settle period (slurmctld must keep
    answering for N s, 5 s in production) is set to --settle-seconds (0 by default): it is a fixed wait
    added to every sample, not latency. Beside it, in the same run, the baseline the field runs today:
    a loop that re-hashes the directory every 5 s, copies the files and runs `scontrol reconfigure`
    (timed to reconfigure's return, with no verification at all), on its own cluster.
P1b 50 swaps within 5 s: how many reconfigures config-sync ran (goal: at most 3) and whether the final
    set is the one applied.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
import shutil
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry

from sidecars.configsync.main import running
from sidecars.configsync.settings import Settings
from sidecars.configsync.sources import FileEntry, FileSet
from sidecars.devcluster import ClusterSpec, DevCluster, Release
from sidecars.devcluster.release import build_chroot, host_release
from sidecars.runtime import logs
from sidecars.slurm.runner import SlurmMetrics
from tests.configsync.kubelet import Volume


def sha_of(files: dict[str, bytes]) -> str:
    return FileSet.build([FileEntry(n, d, 0o644, len(d), Path("/")) for n, d in files.items()]).sha256


def with_max_time(base: dict[str, bytes], minutes: int) -> dict[str, bytes]:
    conf = base["slurm.conf"].replace(b"MaxTime=INFINITE", f"MaxTime={minutes}".encode())
    return {**base, "slurm.conf": conf}


def pct(samples: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), int(-(-p * len(ordered) // 100))))
    return ordered[rank - 1]


def base_files(cluster: DevCluster) -> dict[str, bytes]:
    etc = cluster.conf_path.parent
    return {
        n: (etc / n).read_bytes() for n in ("slurm.conf", "gres.conf", "cgroup.conf") if (etc / n).exists()
    }


def reconfigures(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value(
        "slurm_sidecars_slurm_commands_total", {"command": "scontrol reconfigure", "result": "ok"}
    )
    return value or 0.0


async def config_sync_run(
    release: Release, changes: int, debounce: float, settle: float
) -> dict[str, object]:
    async with DevCluster(release, ClusterSpec(nodes=2)) as cluster:
        base = base_files(cluster)
        vol = Volume(cluster.dir / "vol" / "cm")
        vol.write(base)
        settings = Settings(
            sources=(vol.path,),
            target=cluster.conf_path.parent,
            state_dir=cluster.dir / "cs",
            debounce_seconds=debounce,
            settle_seconds=settle,
        )
        registry = CollectorRegistry()
        client = cluster.client(metrics=SlurmMetrics(registry))
        async with running(settings, client=client, registry=registry) as r:
            svc = r.service
            samples: list[float] = []
            for i in range(1, changes + 1):
                files = with_max_time(base, i)
                want = sha_of(files)
                started = time.monotonic()
                vol.write(files)
                await svc.wait_until(lambda s, w=want: bool(s["applied"]) and s["applied"]["sha256"] == w, 30)
                samples.append(time.monotonic() - started)
                parts = await cluster.client().partitions()
                assert parts[0].max_time_minutes == i, parts
                await asyncio.sleep(random.uniform(0.05, 0.3))  # not in lock-step with anything
            # P1b: the storm
            before = reconfigures(registry)
            last: dict[str, bytes] = {}
            storm_started = time.monotonic()
            last_swap = 0.0
            for i in range(50):
                last = with_max_time(base, 1000 + i)
                vol.write(last)
                last_swap = time.time()  # wall clock: /status stamps outcomes in RFC 3339
                await asyncio.sleep(0.1)
            storm_seconds = time.monotonic() - storm_started
            want = sha_of(last)
            st = await svc.wait_until(lambda s: bool(s["applied"]) and s["applied"]["sha256"] == want, 60)
            settled = (
                datetime.fromisoformat(st["applied"]["at"].replace("Z", "+00:00")).timestamp() - last_swap
            )
            storm_reconfigures = reconfigures(registry) - before
            final = (await cluster.client().partitions())[0].max_time_minutes
    return {
        "samples": samples,
        "storm_reconfigures": storm_reconfigures,
        "storm_seconds": storm_seconds,
        "storm_final_ok": final == 1049,
        "storm_tail": settled,
    }


async def baseline_run(release: Release, samples_wanted: int, period: float = 5.0) -> list[float]:
    """The field's loop: every `period` s hash the mounted directory; on a change, copy and reconfigure."""
    async with DevCluster(release, ClusterSpec(nodes=2)) as cluster:
        base = base_files(cluster)
        vol = Volume(cluster.dir / "vol" / "cm")
        vol.write(base)
        target = cluster.conf_path.parent
        client = cluster.client()
        applied: dict[str, float] = {}
        progress = asyncio.Event()

        def digest() -> str:
            h = hashlib.sha256()
            for name in sorted(p.name for p in vol.path.iterdir() if not p.name.startswith("..")):
                h.update(name.encode() + (vol.path / name).read_bytes())
            return h.hexdigest()

        async def loop() -> None:
            last = digest()
            while True:
                await asyncio.sleep(period)
                now = digest()
                if now != last:
                    for p in vol.path.iterdir():
                        if not p.name.startswith(".."):
                            shutil.copyfile(p, target / p.name)
                    await client.reconfigure()
                    applied[now] = time.monotonic()
                    progress.set()
                    last = now

        task = asyncio.create_task(loop())
        samples: list[float] = []
        try:
            for i in range(1, samples_wanted + 1):
                await asyncio.sleep(random.uniform(0, period))  # changes land at any phase of the loop
                vol.write(with_max_time(base, i))
                started = time.monotonic()
                key = digest()
                while key not in applied:
                    progress.clear()
                    await progress.wait()
                samples.append(applied[key] - started)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return samples


def row(name: str, samples: list[float]) -> str:
    return (
        f"{name:<52} {len(samples):>4} {statistics.median(samples):>8.3f} {pct(samples, 99):>8.3f} "
        f"{max(samples):>8.3f}"
    )


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--release", choices=["host", "chroot"], default="host")
    p.add_argument("--changes", type=int, default=30)
    p.add_argument("--baseline", type=int, default=6, help="baseline samples (each takes up to 5 s)")
    p.add_argument("--debounce-seconds", type=float, default=0.2)
    p.add_argument("--settle-seconds", type=float, default=0.0)
    args = p.parse_args()
    logs.configure(json=False, level="warning")
    release = await host_release() if args.release == "host" else await build_chroot()
    ours = await config_sync_run(release, args.changes, args.debounce_seconds, args.settle_seconds)
    theirs = await baseline_run(release, args.baseline)
    print(f"\nP1: ..data swap -> applied, {release}  (seconds)")
    print(f"{'':<52} {'n':>4} {'p50':>8} {'p99':>8} {'max':>8}")
    print(
        row(
            f"config-sync (debounce {args.debounce_seconds:g}s, settle {args.settle_seconds:g}s), verified",
            ours["samples"],
        )
    )  # type: ignore[arg-type]
    print(row("baseline: re-hash every 5 s + reconfigure, unverified", theirs))
    print(
        f"\nP1b: 50 swaps in {ours['storm_seconds']:.1f}s -> {ours['storm_reconfigures']:.0f} reconfigure(s) "
        f"(goal <= 3); final set applied: {'yes' if ours['storm_final_ok'] else 'NO'}; "
        f"last swap -> verified {ours['storm_tail']:.3f}s"
    )


if __name__ == "__main__":
    asyncio.run(main())
