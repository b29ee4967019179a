"""Whose a node's reason is: Slurm's own words (as its releases write them) are classed by cause,
ours and Slinky's operator's are owned, anything else is somebody else's (`unknown`), never Slurm's."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecars.slurm import reasons
from sidecars.slurm.reasons import Cause, Owner

# as slurmctld writes them (the same words in 22.05 through 26.05)
SLURMS = [
    ("Not responding", Cause.NOT_RESPONDING),
    ("Prolog error", Cause.PROLOG),
    ("Epilog error", Cause.EPILOG),
    ("Kill task failed", Cause.KILL_TASK),
    ("batch job complete failure", Cause.JOB_COMPLETE),
    ("Node unexpectedly rebooted boot_time=1733467200 last response=1733467100", Cause.REBOOT),
    ("Low RealMemory (reported:1000 < 100.00% of configured:64000)", Cause.REGISTRATION),
    ("Low socket*core*thread count, Low CPUs", Cause.REGISTRATION),
    ("gres/gpu count reported lower than configured (0 < 1)", Cause.REGISTRATION),
    ("SlurmdSpoolDir is full", Cause.SPOOL),
]


@pytest.mark.parametrize(("reason", "cause"), SLURMS, ids=[c.value for _, c in SLURMS])
def test_slurms_own_reasons_are_nobodys_and_classed_by_cause(reason: str, cause: Cause) -> None:
    assert reasons.owner(reason) is Owner.SLURM
    assert reasons.cause(reason) is cause
    assert reasons.unowned("IDLE", ("DRAIN",), reason) is cause
    assert reasons.unowned("DOWN", ("NOT_RESPONDING",), reason) is cause


@pytest.mark.parametrize(
    ("reason", "whose"),
    [
        ("slurm-sidecars: gpu check failed: xid 79", Owner.OURS),
        ("slurm-sidecars: maintenance night-1", Owner.OURS),  # an admin's, through our API
        ("slurm-operator: scale-in", Owner.OPERATOR),
        ("disk swap, ticket 4411", Owner.OTHER),
        ("not responding?? checked by bob", Owner.OTHER),  # Slurm's words, but not at the start
        ("NHC: check_hw_ib failed", Owner.OTHER),
        ("", Owner.OTHER),
        (None, Owner.OTHER),
    ],
)
def test_owned_reasons_and_everyone_elses(reason: str | None, whose: Owner) -> None:
    assert reasons.owner(reason) is whose
    listed = reasons.unowned("IDLE", ("DRAIN",), reason)
    assert listed is (None if whose in {Owner.OURS, Owner.OPERATOR} else Cause.UNKNOWN)


def test_only_a_node_held_out_of_service_is_listed() -> None:
    why = "Kill task failed"
    assert reasons.unowned("IDLE", (), why) is None
    assert reasons.unowned("ALLOCATED", (), why) is None
    assert reasons.unowned("FUTURE", (), why) is None
    assert reasons.unowned("IDLE", ("POWERED_DOWN", "CLOUD"), why) is None
    assert reasons.unowned("MIXED", ("DRAIN",), why) is Cause.KILL_TASK
    assert reasons.unowned("DOWN", (), why) is Cause.KILL_TASK
    assert reasons.unowned("IDLE", ("FAIL",), why) is Cause.KILL_TASK


@settings(deadline=None, max_examples=200)
@given(st.text(max_size=400))
def test_any_text_gets_one_owner_and_never_raises(reason: str) -> None:
    whose = reasons.owner(reason)
    assert (whose is Owner.SLURM) == (reasons.cause(reason) is not Cause.UNKNOWN) or whose in {
        Owner.OURS,
        Owner.OPERATOR,
    }


def test_a_mib_reason_is_classed_at_once() -> None:
    """Linear in the reason's length: a MiB of text classed in well under a second, even loaded."""
    huge = "gres/gpu" + "x" * (1 << 20)
    started = time.process_time()
    assert reasons.cause(huge) is Cause.UNKNOWN
    assert reasons.cause("Prolog error " + huge) is Cause.PROLOG
    assert time.process_time() - started < 1.0
