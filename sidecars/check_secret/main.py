"""`slurm-sidecars check-secret --file FILE [--file FILE ...] [--min-bytes N]`: for init steps.

Exit 0 when every file holds a usable key, 2 (one line on stderr) when one is missing, empty,
short, repetitive or a placeholder. The munge key and auth/slurm's slurm.key are checked so before
a daemon starts on them: munged would accept a long enough placeholder.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sidecars.runtime import secretcheck
from sidecars.runtime.settings import PATH, ConfigError, add_flags, declared, number, setting, settings_from


@declared(kw_only=True)
class CheckSecretSettings:
    files: tuple[Path, ...] = setting(
        flag="--file",
        help="a key file (a mounted Secret); repeatable",
        conv=PATH,
        required=True,
        multiple=True,
    )
    min_bytes: int = setting(
        default=secretcheck.MIN_KEY_BYTES, conv=number(unit="bytes"), help="shortest key accepted"
    )


def configure(p: argparse.ArgumentParser) -> None:
    add_flags(p, CheckSecretSettings)


def main(args: argparse.Namespace) -> int:
    settings = settings_from(CheckSecretSettings, args)
    least = settings.min_bytes
    for name in settings.files:
        try:
            data = Path(name).read_bytes()
        except OSError as exc:
            raise ConfigError(f"--file: cannot read {name}: {exc.strerror}") from None
        weak = secretcheck.weakness(data, least)
        if weak:
            raise ConfigError(f"--file: the key in {name} {weak}")
    return 0
