"""`slurm-sidecars check-secret --file FILE [--file FILE ...] [--min-bytes N]`: for init steps.

Exit 0 when every file holds a usable key, 2 (one line on stderr) when one is missing, empty,
short, repetitive or a placeholder. The munge key and auth/slurm's slurm.key are checked so before
a daemon starts on them: munged would accept a long enough placeholder.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sidecars.runtime import secretcheck
from sidecars.runtime.settings import ConfigError, flag, positive


def configure(p: argparse.ArgumentParser) -> None:
    flag(p, "--file", required=True, multiple=True, help="a key file (a mounted Secret); repeatable")
    flag(p, "--min-bytes", default=str(secretcheck.MIN_KEY_BYTES), help="shortest key accepted")


def main(args: argparse.Namespace) -> int:
    least = int(positive(args.min_bytes, "--min-bytes", conv=int))
    for name in args.file:
        try:
            data = Path(name).read_bytes()
        except OSError as exc:
            raise ConfigError(f"--file: cannot read {name}: {exc.strerror}") from None
        weak = secretcheck.weakness(data, least)
        if weak:
            raise ConfigError(f"--file: the key in {name} {weak}")
    return 0
