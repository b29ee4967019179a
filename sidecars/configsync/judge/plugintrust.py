"""Where plugins may be loaded from: never from a directory a ConfigMap or Secret fills.

The author of a ConfigMap is trusted with the config, never with our processes. A `PluginDir` inside
a watched source, or inside the target slurmctld reads, would have Slurm's parser, the dry run's
slurmctld and then the live one load shared objects that came with the config (a Secret may carry
binary files). Such a set is refused before anything runs on it; so is a PluginDir, here, that
someone other than root or our own user could write.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.runtime.trustedpath import Trust, UntrustedPath


def _real(path: Path) -> Path:
    return path.resolve() if path.exists() else Path(os.path.normpath(path))


def plugin_dir_problems(conf: SlurmConf, filled: Iterable[Path]) -> list[str]:
    """Why the candidate's PluginDir must not be used: an entry inside a directory in `filled` (the
    sources and the target), or an existing one that is not trusted."""
    return value_problems(conf.options.get("plugindir", ""), filled)


def value_problems(value: str, filled: Iterable[Path]) -> list[str]:
    """The same for a `PluginDir=` value as written (slurm.conf's or slurmdbd.conf's)."""
    roots = [(root, _real(root)) for root in filled]
    problems: list[str] = []
    for entry in filter(None, (e.strip() for e in value.split(":"))):
        path = Path(os.path.normpath(entry))
        real = _real(path)
        inside = next((r for r, rr in roots if path.is_relative_to(r) or real.is_relative_to(rr)), None)
        if inside is not None:
            problems.append(
                f"PluginDir={value}: {entry} lies in {inside}, which the config's own volumes fill: "
                "plugins are never loaded from there"
            )
        elif real.is_dir():
            try:
                Trust.ours().check_dir(real)
            except UntrustedPath as exc:
                problems.append(
                    f"PluginDir={value}: {exc}: plugins are loaded only from a directory we trust"
                )
    return problems
