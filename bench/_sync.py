"""What the config-sync benchmarks share: config-sync's source volume on a dev cluster, and
production's settings over it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from sidecars.configsync.settings import Settings
from sidecars.devcluster import DevCluster
from sidecars.devcluster.volume import AtomicVolume

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the settings builder lives with the tests
from tests.settings import build


async def production_settings(
    cluster: DevCluster, base: dict[str, bytes], **overrides: Any
) -> tuple[AtomicVolume, Settings]:
    """The volume config-sync reads, holding `base`, and production's settings (but `overrides`)
    for `cluster`: its config directory the target, this release's slurmctld, in its chroot, the
    dry run's."""
    vol = AtomicVolume(cluster.dir / "vol" / "cm")
    vol.write(base)
    settings = build(
        Settings,
        quick=False,
        sources=(vol.path,),
        target=cluster.conf_path.parent,
        state_dir=cluster.dir / "cs",
        plugin_dir=await cluster.plugin_dir(),
        dry_run_slurmctld=tuple(cluster.in_namespace("slurmctld")),
        **overrides,
    )
    return vol, settings
