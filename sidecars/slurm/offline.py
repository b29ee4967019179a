"""A client with no cluster behind it (`plan` offline): Slurm's parse runs, nothing else.

`scontrol --version` parses SLURM_CONF and sends nothing. Any other command would look for a
controller and wait out Slurm's own retries (about a minute) for one that is not there: refused at
once instead, as a SlurmCommandError its caller already handles.
"""

from __future__ import annotations

from collections.abc import Sequence

from sidecars.slurm.errors import SlurmCommandError

PARSE = ("scontrol", "--version")


def parse_only(argv: Sequence[str]) -> None:
    """A SlurmClient guard: raises for every command but the parse."""
    if tuple(argv[:2]) != PARSE:
        raise SlurmCommandError(argv, "not asked: no cluster (an offline plan reaches no controller)")
