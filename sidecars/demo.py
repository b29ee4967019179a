"""`slurm-sidecars demo`: a real Slurm on this machine. For now it starts the dev cluster, prints
`sinfo` and waits for Ctrl-C; the full tour of the sidecars comes with the demo issue (#6)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from sidecars.runtime.daemon import run as run_daemon
from sidecars.runtime.settings import ConfigError, flag


def configure(p: argparse.ArgumentParser) -> None:
    flag(
        p,
        "--release",
        default="host",
        choices=["host", "chroot"],
        help="host: this machine's Slurm packages; chroot: Debian 13's 24.11 in a chroot",
    )
    flag(p, "--nodes", default="3", help="number of slurmd nodes")
    p.add_argument("--tour", action="store_true", help="walk through the features and exit (issue #6)")


def main(args: argparse.Namespace) -> int:
    from sidecars.devcluster import DevCluster, build_chroot, host_release
    from sidecars.devcluster.release import ReleaseUnavailable
    from sidecars.devcluster.slurmconf import ClusterSpec

    if args.tour:
        raise ConfigError("--tour is not available yet (issue #6)")
    try:
        nodes = int(args.nodes)
    except ValueError:
        raise ConfigError(f"--nodes: not a number: {args.nodes!r}") from None
    if not 1 <= nodes <= 16:
        raise ConfigError(f"--nodes: must be 1..16, got {nodes}")

    async def body(stop: asyncio.Event) -> None:
        try:
            release = await (host_release() if args.release == "host" else build_chroot())
        except ReleaseUnavailable as exc:
            raise ConfigError(str(exc)) from None
        async with DevCluster(release, ClusterSpec(nodes=nodes, gpus=4)) as cluster:
            proc = await asyncio.create_subprocess_exec("sinfo", "-N", "-l", env=cluster.env)
            await proc.wait()
            print(
                f"\nSlurm {release.version} is running in {cluster.dir}. Try it from another shell:\n"
                f"  export SLURM_CONF={cluster.conf_path} PATH={cluster.bin_dir}:$PATH\n"
                "  sbatch --wrap 'sleep 30'; squeue\n\nCtrl-C stops it and removes everything.",
                flush=True,
            )
            await stop.wait()
        print("stopped; nothing left running", file=sys.stderr)

    return run_daemon(body)
