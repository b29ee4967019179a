"""Whose a node's reason is: ours, Slinky's operator's, Slurm's own (and what made Slurm set it), or
somebody else's (an admin's `scontrol update`, another tool's).

Slurm sets a node's reason itself on a handful of events, always in the same words (slurmctld's
source; the same in 22.05 through 26.05). Such a drain has no owner to lift it: "it stays drained
until somebody resumes it by hand". Classing them is what lets the control plane report them, and an
opt-in policy act on them, while a reason anybody typed is never touched.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from sidecars.protocol.drains import REASON_PREFIX, SLINKY_OPERATOR_PREFIX

# Slinky's slurm-operator writes its own reasons with this prefix and touches no other (v1.3,
# IsNodeReasonOurs); we touch none of its


class Owner(StrEnum):
    OURS = "ours"
    OPERATOR = "operator"
    SLURM = "slurm"  # Slurm set it itself: nobody owns it
    OTHER = "other"  # an admin's, or another tool's: theirs, never ours to lift


class Cause(StrEnum):
    """Why Slurm set a reason itself; also the `class` label of the unowned drains metric."""

    NOT_RESPONDING = "not_responding"
    PROLOG = "prolog"
    EPILOG = "epilog"
    KILL_TASK = "kill_task"
    JOB_COMPLETE = "job_complete"
    REBOOT = "reboot"
    REGISTRATION = "registration"  # what slurmd reported is less than slurm.conf says
    SPOOL = "spool"
    # not Slurm's: an admin's or another tool's reason (or none given); reported, never acted on
    UNKNOWN = "unknown"


# (how Slurm's reason starts, why): matched on the start, case as Slurm writes it
_SLURM_REASONS: tuple[tuple[str, Cause], ...] = (
    ("Not responding", Cause.NOT_RESPONDING),
    ("Prolog error", Cause.PROLOG),
    ("Prolog failed", Cause.PROLOG),
    ("Epilog error", Cause.EPILOG),
    ("Kill task failed", Cause.KILL_TASK),
    ("batch job complete failure", Cause.JOB_COMPLETE),
    ("Node unexpectedly rebooted", Cause.REBOOT),
    ("Node silently failed and came back", Cause.REBOOT),
    ("reboot timed out", Cause.REBOOT),
    ("Low RealMemory", Cause.REGISTRATION),
    ("Low socket*core*thread count", Cause.REGISTRATION),
    ("Low CPUs", Cause.REGISTRATION),
    ("Low TmpDisk", Cause.REGISTRATION),
    ("Node configuration differs from hardware", Cause.REGISTRATION),
    ("NO NETWORK ADDRESS FOUND", Cause.REGISTRATION),
    ("SlurmdSpoolDir is full", Cause.SPOOL),
)


def owner(reason: str | None) -> Owner:
    text = (reason or "").strip()
    if text.startswith(REASON_PREFIX):
        return Owner.OURS
    if text.startswith(SLINKY_OPERATOR_PREFIX):
        return Owner.OPERATOR
    return Owner.SLURM if cause(text) is not Cause.UNKNOWN else Owner.OTHER


def cause(reason: str | None) -> Cause:
    """What made Slurm set `reason`, or UNKNOWN when Slurm did not (or nobody gave one)."""
    text = (reason or "").strip()
    for start, why in _SLURM_REASONS:
        if text.startswith(start):
            return why
    # `gres/gpu count reported lower than configured (0 < 1)`, `gres/gpu:a100 count too low`
    if text.startswith("gres/") and (" count reported lower" in text or " count too low" in text):
        return Cause.REGISTRATION
    return Cause.UNKNOWN


def out_of_service(base: str, flags: Iterable[str]) -> bool:
    """Drained, down or failed: what a reason holds out of service. A FUTURE record or a powered
    down cloud node is not (nothing holds it: it is idle by design)."""
    flags = set(flags)
    return "DRAIN" in flags or base == "DOWN" or "FAIL" in flags


def unowned(base: str, flags: Iterable[str], reason: str | None) -> Cause | None:
    """Why a node out of service for a reason nobody owns is out (UNKNOWN: an admin's or another
    tool's reason); None when it is in service or its reason is ours or the operator's."""
    if not out_of_service(base, flags) or owner(reason) in {Owner.OURS, Owner.OPERATOR}:
        return None
    return cause(reason)
