"""Capture real Slurm output for the parsing tests: `capture_slurm.py RELEASE OUT_DIR`.

RELEASE is one of host, chroot, sid (see sidecars/devcluster/release.py). The scenario is the one
tests/slurm/test_parsing_captured.py describes: job 1 (gpu:2, 10 min) RUNNING on n1, job 2 (5 min)
RUNNING on n2 which an admin drained ("maint test"), job 3 (no limit) RUNNING on n3, job 4 (gpu:1,
2 min) PENDING for Resources. Each command's stdout goes to a file named after it, a non-empty
stderr beside it, and MANIFEST.tsv lists them with their exit codes; `_setup/` keeps the configs.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from pathlib import Path

from sidecars.devcluster import ClusterSpec, DevCluster
from sidecars.devcluster.release import RELEASE_NAMES, release_named
from sidecars.runtime import logs

COMMANDS = [
    "sinfo --json",
    "squeue --json",
    "scontrol show node --json",
    "scontrol show nodes --json",
    "scontrol -o show node",
    "scontrol -o show job -d",
    "scontrol show config",
    "scontrol ping",
    "sdiag",
    "sinfo -V",
    "scontrol --version",
    "sinfo --yaml",
    "squeue --yaml",
    "scontrol show job --json",
    "scontrol show partition --json",
    "scontrol --json show node",
    "scontrol -o show partition",
    "scontrol show node",
    "scontrol show job -d",
    "squeue",
    "sinfo -N -l",
    "squeue --json=v0.0.43",
    "sinfo --json=v0.0.43",
]


def file_name(command: str) -> str:
    # the names the first captures used: "scontrol show job -d" -> "scontrol-show-job--d"
    name = command.replace(" --", "--").replace(" -", "--").replace(" ", "-")
    if "--json" in command:
        return f"{name}.json"
    return f"{name}.yaml" if "--yaml" in command else f"{name}.txt"


async def capture(release_name: str, out: Path) -> None:
    release = await release_named(release_name)
    async with DevCluster(release, ClusterSpec(gpus=4)) as c:
        jobs = [
            await c.sbatch("-J", "gres2", "-w", "n1", "--gres=gpu:2", "-t", "10"),
            await c.sbatch("-J", "plain", "-w", "n2", "-t", "5"),
            await c.sbatch("-J", "third", "-w", "n3"),
        ]
        for job in jobs:
            await c.wait_job(job, "RUNNING", timeout=60)
        waiting = await c.sbatch("-J", "waiting", "--gres=gpu:1", "-t", "2")
        await c.client().drain(["n2"], "maint test")
        await c.wait_node("n2", lambda n: n.state.drain, what="n2 draining")
        deadline = time.monotonic() + 60
        while (await c.wait_job(waiting, "PENDING")).state_reason != "Resources":
            if time.monotonic() > deadline:  # the scheduler looks at a new job within seconds
                raise SystemExit(f"job {waiting} never pended for Resources")
            await asyncio.sleep(0.2)
        out.mkdir(parents=True, exist_ok=True)
        rows = ["file\trc\tcommand\tstderr_bytes\tcaptured_at"]
        for command in COMMANDS:
            proc = await asyncio.create_subprocess_exec(
                *command.split(),
                env=c.env,
                cwd=str(c.out_dir),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            stdout, stderr = await proc.communicate()
            name = file_name(command)
            (out / name).write_bytes(stdout)
            if stderr:
                (out / f"{name.rsplit('.', 1)[0]}.stderr").write_bytes(stderr)
            at = time.strftime("%FT%T", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}Z"
            rows.append(f"{name}\t{proc.returncode}\t{command}\t{len(stderr)}\t{at}")
        (out / "MANIFEST.tsv").write_text("\n".join(rows) + "\n")
        setup = out / "_setup"
        setup.mkdir(exist_ok=True)
        for conf in ("slurm.conf", "gres.conf", "cgroup.conf"):
            if (c.conf_path.parent / conf).exists():
                shutil.copy(c.conf_path.parent / conf, setup / conf)
        for job in [*jobs, waiting]:
            await c.scancel(job)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("release", choices=RELEASE_NAMES)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    logs.configure(json=False, level="warning")
    asyncio.run(capture(args.release, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
