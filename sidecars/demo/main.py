"""`slurm-sidecars demo`: the sidecars on a real Slurm on this machine, no Kubernetes needed.

Without `--tour` it runs until Ctrl-C with a live status table; with `--tour` it walks through the
features and exits 0 with a summary."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from sidecars.runtime import logs
from sidecars.runtime.daemon import run as run_daemon
from sidecars.runtime.settings import (
    ConfigError,
    add_flags,
    choice,
    declared,
    number,
    setting,
    settings_from,
)
from sidecars.slurm import daemons

if TYPE_CHECKING:
    from sidecars.devcluster import Release


@declared()
class DemoSettings:
    release: str = setting(
        default="host",
        conv=choice("host", "chroot", "sid"),
        help="host: this machine's Slurm packages; chroot: Debian 13's 24.11 in a chroot; "
        "sid: Debian unstable's 26.05 in a chroot",
    )
    nodes: int = setting(default=3, conv=number(most=16), help="number of slurmd nodes (3 to 16)")
    shape: str = setting(
        default="classic",
        conv=choice("classic", "slinky"),
        help="classic: static nodes and munge; slinky: as Slinky deploys it (configless slurmctld, "
        "slurmd -Z dynamic workers in a NodeSet, auth/slurm; needs --release chroot or sid)",
    )
    tour: bool = setting(default=False, switch=True, help="walk through the features, then exit")
    accounting: bool = setting(
        default=False,
        switch=True,
        help="the accounting shape: a MariaDB and slurmdbd of the cluster's own, jobs in sacct "
        "(classic shape only; adds seconds to the start)",
    )
    upgrade_to: str | None = setting(
        default=None,
        conv=choice("sid"),
        help="with --accounting and --release chroot: the tour ends with a whole-cluster upgrade to this "
        "release (sid: 26.05), slurmdbd then slurmctld then the workers, run by the control plane and "
        "shown on its page and by `upgrade status`",
    )


def configure(p: argparse.ArgumentParser) -> None:
    add_flags(p, DemoSettings)


def _upgrade_line(newer: Release, url: str, token: Path) -> str:
    images = " ".join(f"--image {r}={newer.name}" for r in daemons.UPGRADE_ORDER)
    return (
        f"  a whole-cluster upgrade: slurm-sidecars upgrade start --slurm-version {newer.version} {images}"
        f" --control-plane {url} --token-file {token}\n"
    )


def main(args: argparse.Namespace) -> int:
    from sidecars.demo.live import live_table
    from sidecars.demo.stack import DemoStack
    from sidecars.demo.tour import run_tour
    from sidecars.devcluster import ClusterSpec, slinky
    from sidecars.devcluster.release import ReleaseUnavailable, release_named

    # the demo's own narration is the output; its log only says what went wrong
    if logs.asked(args).log_level == "info":
        logs.configure(json=False, level="warning")
    settings = settings_from(DemoSettings, args)
    nodes = settings.nodes
    if not 3 <= nodes <= 16:
        raise ConfigError(f"--nodes: must be 3..16, got {nodes}")
    outcome: list[bool] = []

    async def body(stop: asyncio.Event) -> None:
        try:
            release = await release_named(settings.release)
        except ReleaseUnavailable as exc:
            raise ConfigError(str(exc)) from None
        why = slinky.check(ClusterSpec(shape=settings.shape), release.version)
        if settings.accounting and settings.shape != "classic":
            why = "--accounting runs with the classic shape only"
        if why:
            raise ConfigError(f"--shape {settings.shape}: {why}")
        newer = None
        if settings.upgrade_to:
            if not settings.accounting or settings.release != "chroot":
                raise ConfigError(
                    "--upgrade-to: needs --accounting and --release chroot (24.11, within 26.05's window)"
                )
            try:
                newer = await release_named(settings.upgrade_to)
            except ReleaseUnavailable as exc:
                raise ConfigError(str(exc)) from None
        print(
            f"starting Slurm {release.version} ({settings.shape} shape), config-sync, the control plane "
            f"and {nodes} worker agents ...",
            flush=True,
        )
        async with DemoStack(
            release, nodes, settings.shape, accounting=settings.accounting, upgrade_to=newer
        ) as stack:
            c = stack.cluster
            print(
                f"\nSlurm {release.version} is running in {c.dir}.\n"
                f"  config-sync status:   {stack.config_sync_url}/status\n"
                f"  control plane:        {stack.control_plane_url}/v1/nodes (token in {stack.token_file})\n"
                f"  web page:             {stack.page_url} (viewer token in {stack.viewer_token_file})\n"
                f"  the ConfigMap to edit: {c.dir / 'configmap'} (edit ..data/slurm.conf via a new version)\n"
                f"  Slurm from a shell:   export SLURM_CONF={c.conf_path} PATH={c.bin_dir}:$PATH\n"
                f"  logs:                 {c.log_dir}\n"
                f"  a maintenance window: slurm-sidecars maintenance create --nodes n2 --start now"
                f" --duration 30m --reason test --control-plane {stack.control_plane_url}"
                f" --token-file {stack.token_file}\n"
                + (
                    f"  accounting:           slurmdbd on a MariaDB in {c.dir / 'mariadb'}; sacct works\n"
                    if settings.accounting
                    else ""
                )
                + (_upgrade_line(newer, stack.control_plane_url, stack.token_file) if newer else ""),
                flush=True,
            )
            if settings.tour:
                outcome.append(await run_tour(stack))
                return
            print("Ctrl-C stops it and removes everything.", flush=True)
            await live_table(stack, stop)
        print("stopped; nothing left running", file=sys.stderr)

    # its teardown stops five daemons and a cluster (seconds on a busy machine), not one role's loop
    code = run_daemon(body, grace_seconds=30.0)
    if code == 0 and outcome and not outcome[0]:
        return 1
    return code
