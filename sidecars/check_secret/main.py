"""`slurm-sidecars check-secret --file FILE [--file FILE ...] [--min-bytes N]`: for init steps.

Exit 0 when every file holds a usable key, 2 (one line on stderr) when one is missing, empty,
short, repetitive or a placeholder. The munge key and auth/slurm's slurm.key are checked so before
a daemon starts on them: munged would accept a long enough placeholder.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sidecars.runtime import secretcheck
from sidecars.runtime.settings import PATH, ConfigError, Flag, add_flags, convert, number

FILE_FLAG = Flag(
    name="--file", help="a key file (a mounted Secret); repeatable", conv=PATH, required=True, multiple=True
)
MIN_BYTES_FLAG = Flag(
    name="--min-bytes",
    help="shortest key accepted",
    conv=number(unit="bytes"),
    default=secretcheck.MIN_KEY_BYTES,
)


def configure(p: argparse.ArgumentParser) -> None:
    add_flags(p, FILE_FLAG, MIN_BYTES_FLAG)


def main(args: argparse.Namespace) -> int:
    least = int(convert(MIN_BYTES_FLAG, args))
    for name in convert(FILE_FLAG, args):
        try:
            data = Path(name).read_bytes()
        except OSError as exc:
            raise ConfigError(f"--file: cannot read {name}: {exc.strerror}") from None
        weak = secretcheck.weakness(data, least)
        if weak:
            raise ConfigError(f"--file: the key in {name} {weak}")
    return 0
