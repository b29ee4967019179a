"""PL1: `plan` latency, online, against the apply's own validation of the same sets, in the same run.

Run: `.venv/bin/python bench/plan_latency.py [--release host|chroot|sid|both] [--plans 10]
[--scale]` (`--scale`: 1,000 node records without a slurmd and 10,000 held jobs, the P1-scale
cluster; else 3 nodes).

On one cluster and one config-sync (dry run on, as it ships), interleaved so that neither side
gets the warmer cache: a plan is `POST /v1/plan` timed end to end over HTTP (what
`slurm-sidecars plan --config-sync` waits for); the baseline is the validation an apply runs on
the same set (`Validator.validate`: our checks, Slurm's parse, the dry run, the job impact),
called in the same process. Each set is a partition's MaxTime changed. Goal: the plan's p50
within 10 % of the validation's.

Beside it, slurmctld's RPCs over all the plans (sdiag's count by message type, before and after):
a plan may only read. Every type whose count grew is printed; goal: none outside the reads.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import re
import statistics
import time
from pathlib import Path

import aiohttp
from _report import percentile, releases, result
from config_at_size import shadow_built
from config_latency import base_files, with_max_time
from prometheus_client import CollectorRegistry

from sidecars.configsync.fileset.sources import FileEntry, FileSet
from sidecars.configsync.main import running
from sidecars.configsync.settings import Settings
from sidecars.devcluster import ClusterSpec, DevCluster, Release
from sidecars.devcluster.volume import AtomicVolume
from sidecars.runtime import logs
from sidecars.slurm.runner import SlurmMetrics

TOKEN = "plan-benchmark-operator-token-0123456789"
RPC = re.compile(r"^\s*(REQUEST_\S+|MESSAGE_\S+)\s+\(\s*\d+\)\s+count:(\d+)", re.M)
READS = re.compile(r"INFO|PING|STATS|_CONFIG$|BUILD|LICENSE|SHARE|PRIORITY|FED|NODE_REGISTRATION")


async def rpc_counts(cluster: DevCluster) -> dict[str, int]:
    out = await cluster._exec(cluster.in_namespace("sdiag"))
    return {name: int(n) for name, n in RPC.findall(out)}


def as_set(files: dict[str, bytes], source: Path) -> FileSet:
    return FileSet.build([FileEntry(n, d, 0o644, len(d), source) for n, d in files.items()])


async def measure(release: Release, plans: int, scale: bool) -> None:
    spec = (
        ClusterSpec(nodes=3, node_records={"DOWN": 1000}, max_job_count=20000)
        if scale
        else ClusterSpec(nodes=3)
    )
    async with DevCluster(release, spec) as cluster:
        if scale:
            await cluster.submit_held(10000)
        base = base_files(cluster)
        vol = AtomicVolume(cluster.dir / "vol" / "cm")
        vol.write(base)
        settings = Settings(
            http_address=("127.0.0.1", 0),  # a port of its own
            sources=(vol.path,),
            target=cluster.conf_path.parent,
            state_dir=cluster.dir / "cs",
            settle_seconds=0.0,
            plugin_dir=await cluster.plugin_dir(),
            dry_run_slurmctld=tuple(cluster.in_namespace("slurmctld")),
            operator_token=TOKEN,
        )
        registry = CollectorRegistry()
        client = cluster.client(metrics=SlurmMetrics(registry))
        planned: list[float] = []
        validated: list[float] = []
        async with running(settings, client=client, registry=registry) as r:
            svc = r.service
            await shadow_built(svc.validator.dry_runner)
            live = svc.applied.files if svc.applied is not None else None
            url = f"http://127.0.0.1:{r.port}/v1/plan"
            before = await rpc_counts(cluster)
            async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as s:
                for i in range(plans):
                    files = with_max_time(base, 100 + i)
                    body = {
                        "files": [{"name": n, "data": base64.b64encode(d).decode()} for n, d in files.items()]
                    }
                    started = time.monotonic()
                    async with s.post(url, json=body) as resp:
                        answer = await resp.json()
                    planned.append(time.monotonic() - started)
                    if answer.get("verdict") != "would-apply":
                        print(f"  plan {i}: {answer.get('verdict')} {answer.get('reason', answer)}")
            after = await rpc_counts(cluster)
            for i in range(plans):  # the baseline, after the plans so their RPCs are counted alone
                started = time.monotonic()
                verdict = await svc.validator.validate(as_set(with_max_time(base, 200 + i), vol.path), live)
                validated.append(time.monotonic() - started)
                if not verdict.ok:
                    print(f"  validation {i}: {verdict.reason}")
        grew = {k: after[k] - before.get(k, 0) for k in after if after[k] > before.get(k, 0)}
        writes = sorted(k for k in grew if not READS.search(k))
        p50, v50 = statistics.median(planned), statistics.median(validated)
        size = "1,000 records, 10,000 jobs" if scale else "3 nodes"
        print(
            f"{release.short} {size}: plan p50 {p50 * 1000:.0f} ms "
            f"p95 {percentile(planned, 95) * 1000:.0f} ms; "
            f"validation p50 {v50 * 1000:.0f} ms p95 {percentile(validated, 95) * 1000:.0f} ms; "
            f"slurmctld RPCs during the plans: {grew}"
        )
        result(
            f"PL1-{release.short}{'-scale' if scale else ''}",
            f"plan online p50, {size}",
            f"{p50 * 1000:.0f} ms",
            f"apply's validation {v50 * 1000:.0f} ms",
            "within 10 %; reads only",
            p50 <= v50 * 1.10 and not writes,
        )
        if writes:
            print(f"  RPCs beyond reads: {writes}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--release", default="host", choices=["host", "chroot", "sid", "both"])
    parser.add_argument("--plans", type=int, default=10)
    parser.add_argument("--scale", action="store_true")
    args = parser.parse_args()
    logs.configure(level="warning")
    for release in await releases(args.release):
        await measure(release, args.plans, args.scale)


if __name__ == "__main__":
    asyncio.run(main())
