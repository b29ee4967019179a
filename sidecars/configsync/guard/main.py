"""`slurm-sidecars config-guard --target DIR`: run by slurmctld's entrypoint just before it execs
slurmctld, so that a slurmctld that (re)starts at any instant reads only a verified set.

config-sync marks a set it swaps into the target as unverified until slurmctld has proven it runs
on it, and keeps the last verified generation beside it (stage.py). When slurmctld starts while
that marker is there (it died of the new set, the node rebooted, the kubelet restarted it), this
puts the verified generation back first and leaves a record that config-sync reports. Without a
marker it changes nothing. It needs no config-sync running: only the target directory.

Exit 0: the target holds a verified set (it did, or does now); 1: a set marked unverified could not
be replaced (slurmctld must not start on it: the container fails, visibly, and is retried);
2: a bad invocation.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import structlog

from sidecars.configsync.fileset.stage import Target
from sidecars.protocol.configsync import RestoredBy
from sidecars.runtime.settings import DIR, ConfigError, add_flags, declared, setting, settings_from

log = structlog.get_logger(__name__)

BY = RestoredBy.CONFIG_GUARD


@declared()
class GuardSettings:
    target: Path = setting(
        conv=DIR, required=True, help="the directory slurmctld reads (config-sync's --target)"
    )


def configure(p: argparse.ArgumentParser) -> None:
    add_flags(p, GuardSettings)


def main(args: argparse.Namespace) -> int:
    target = settings_from(GuardSettings, args).target
    if not target.is_dir():
        raise ConfigError(f"--target {target} is not a directory")
    try:
        restored = Target(target).restore(BY)
    except OSError as exc:
        print(f"slurm-sidecars config-guard: cannot put the last verified set back: {exc}", file=sys.stderr)
        return 1
    if restored is None:
        log.info("config_guard_nothing_to_do", target=str(target))
        return 0
    print(
        f"slurm-sidecars config-guard: generation {restored.unverified_generation} in {target} was never "
        f"verified; put generation {restored.restored_generation} back",
        file=sys.stderr,
    )
    return 0
