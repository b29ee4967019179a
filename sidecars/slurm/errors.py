"""How a Slurm command can fail, classified so that callers retry only what may pass next time."""

from __future__ import annotations

import re
from collections.abc import Sequence

# Slurm's own words when the controller (or the munge daemon it needs) cannot be reached.
# These pass once the controller is back; anything else (bad name, permission) will not.
_UNREACHABLE = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Zero Bytes were transmitted"
    r"|Connection refused|Communication connection failure|Transport endpoint is not connected"
    r"|Slurm backup controller in standby mode|Unable to establish connection|Munge.*(?:socket|connect)"
    r"|Resource temporarily unavailable|Connection timed out|Unable to connect",
    re.IGNORECASE,
)


# Slurm says it cannot reach the controller in one short line, first or last: a longer text (a parse
# error quoting a MiB line of the set) is searched at its ends only (the whole: 70 ms on the loop)
CLASSIFIED_CHARS = 8192


def _ends(text: str) -> str:
    if len(text) <= 2 * CLASSIFIED_CHARS:
        return text
    return text[:CLASSIFIED_CHARS] + "\n" + text[-CLASSIFIED_CHARS:]


class SlurmError(Exception):
    """Any failure of a Slurm command. `message` is Slurm's own text where it gave one."""

    def __init__(self, argv: Sequence[str], message: str, returncode: int | None = None) -> None:
        self.argv = tuple(argv)
        self.message = message.strip()
        self.returncode = returncode
        super().__init__(f"{' '.join(self.argv[:3])}: {self.message or f'exit {returncode}'}")


class SlurmUnreachable(SlurmError):
    """The controller did not answer (down, restarting, network): transient, worth retrying."""


class SlurmTimeout(SlurmUnreachable):
    """The command ran past its timeout and was killed."""


class SlurmCommandError(SlurmError):
    """Slurm answered and refused (invalid node name, permission, bad value): permanent."""


class SlurmFenced(SlurmError):
    """A write not sent: the process may not write now (a control plane that lost its Lease)."""


class SlurmParseError(SlurmError):
    """The command succeeded but its output was not what this release should print."""


def classify(argv: Sequence[str], returncode: int, stderr: str, stdout: str = "") -> SlurmError:
    """Turn a failed command into the right error, keeping Slurm's message."""
    text = stderr.strip() or stdout.strip()
    if _UNREACHABLE.search(_ends(text)):
        return SlurmUnreachable(argv, text, returncode)
    return SlurmCommandError(argv, text, returncode)
