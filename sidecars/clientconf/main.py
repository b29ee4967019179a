"""`slurm-sidecars client-conf --from FILE --out FILE`: for init steps.

Renders the client slurm.conf (controller hosts, auth, accounting host; no PluginDir: the image's
compiled-in one) from the cluster's slurm.conf, so that the Slurm commands of a sidecar outside
slurmctld's pod never read the raw ConfigMap. Exit 0 once written, 2 (one line on stderr) when the
source cannot be rendered. Rendered once, at the pod's start: a change of the controllers' names
takes a restart of the pod (docs/security.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sidecars.runtime.files import replace_atomically
from sidecars.runtime.settings import PATH, ConfigError, add_flags, declared, setting, settings_from
from sidecars.slurm.clientconf import ClientConfError, render


@declared(kw_only=True)
class ClientConfSettings:
    source: Path = setting(
        flag="--from", help="the cluster's slurm.conf (the mounted ConfigMap)", conv=PATH, required=True
    )
    out: Path = setting(help="where to write the client slurm.conf", conv=PATH, required=True)


def configure(p: argparse.ArgumentParser) -> None:
    add_flags(p, ClientConfSettings)


def main(args: argparse.Namespace) -> int:
    settings = settings_from(ClientConfSettings, args)
    source, out = settings.source, settings.out
    try:
        rendered = render(source)
    except ClientConfError as exc:
        raise ConfigError(f"--from: {exc}") from None
    try:
        replace_atomically(out, rendered.text, mode=0o644)
    except OSError as exc:
        raise ConfigError(f"--out: cannot write {out}: {exc.strerror}") from None
    return 0
