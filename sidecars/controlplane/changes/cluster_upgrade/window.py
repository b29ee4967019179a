"""Slurm's upgrade window for a whole-cluster upgrade, checked against every running daemon.

Slurm's upgrade guide: a daemon accepts state, RPCs and database records from the previous two
major releases, three since 24.11 (so 26.05 accepts 25.11, 25.05 and 24.11). The window is the
new release's: a target of 26.05 may replace daemons as old as 24.11, not older. Nothing moves
backwards: a daemon already newer than the target would be a downgrade, which Slurm does not
support (its state and database are written in a format the older one cannot read).
"""

from __future__ import annotations

from collections.abc import Mapping

from sidecars.slurm import Version, daemons

# Slurm's major releases in order (a release not listed is placed among them by its number)
RELEASES = (
    (20, 2),
    (20, 11),
    (21, 8),
    (22, 5),
    (23, 2),
    (23, 11),
    (24, 5),
    (24, 11),
    (25, 5),
    (25, 11),
    (26, 5),
)
WINDOW_RELEASES = 3  # since 24.11
WINDOW_RELEASES_BEFORE_24_11 = 2


def release_distance(newer: Version, older: Version) -> int:
    """How many major releases `older` is behind `newer` (an unknown release is placed in order)."""
    known = sorted({*RELEASES, (newer.major, newer.minor), (older.major, older.minor)})
    return known.index((newer.major, newer.minor)) - known.index((older.major, older.minor))


def window(target: Version) -> int:
    """How many major releases back a daemon of `target` accepts."""
    return WINDOW_RELEASES if target.at_least(24, 11) else WINDOW_RELEASES_BEFORE_24_11


def _rank(daemon: str) -> int:
    """Slurm's order: slurmdbd newest, then the controllers, then the workers."""
    return 0 if daemon == daemons.SLURMDBD else 1 if daemon.startswith(daemons.SLURMCTLD) else 2


def refusal(target: Version, running: Mapping[str, Version], *, accounting: bool = True) -> str | None:
    """Why an upgrade to `target` must not start on daemons running `running`, or None.

    `running`: daemon -> release, with "slurmdbd", "slurmctld" (or "slurmctld:<host>") and
    "slurmd:<node>" keys. Without `accounting` (the cluster runs no slurmdbd) none is looked for."""
    if accounting and not any(_rank(d) == 0 for d in running):
        return "slurmdbd's release was not read: every daemon's release must be known before anything changes"
    if not any(_rank(d) == 1 for d in running):
        return (
            "slurmctld's release was not read: every daemon's release must be known before anything changes"
        )
    for daemon, v in sorted(running.items()):
        if (v.major, v.minor) > (target.major, target.minor):
            return f"{daemon} runs {v}, newer than the target {target}: Slurm does not support a downgrade"
        if release_distance(target, v) > window(target):
            return (
                f"{daemon} runs {v}, {release_distance(target, v)} releases behind {target}: Slurm "
                f"{target.major}.{target.minor:02d} accepts state and records from {window(target)} "
                "releases back; upgrade through an intermediate release first"
            )
    # the cluster must already be in Slurm's order (slurmdbd >= slurmctld >= slurmd) to start
    for daemon, v in sorted(running.items()):
        for other, w in sorted(running.items()):
            if _rank(daemon) < _rank(other) and (v.major, v.minor) < (w.major, w.minor):
                return f"{daemon} runs {v}, older than {other} ({w}): the cluster is out of Slurm's order"
    return None
