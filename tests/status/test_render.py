"""The table itself: times a person can compare with, and which drains count as in progress."""

from __future__ import annotations

from sidecars.operator.status import NodeRow, StatusReport, render, when

NOW = 1_800_000_000  # 2027-01-15T08:00:00Z


def _node(
    name: str,
    state: str,
    *,
    flags: tuple[str, ...] = (),
    jobs: tuple[int, ...] = (),
    reason: str | None = None,
    until: int | None = None,
) -> NodeRow:
    return NodeRow(name=name, state=state, flags=flags, reason=reason, jobs=jobs, busy_until=until)


def test_when_shows_wall_time_and_countdown() -> None:
    assert when(None, NOW) == "-"
    assert when(NOW + 3725, NOW) == "09:02:05Z (in 1h02m05s)"
    assert when(NOW + 59, NOW) == "08:00:59Z (in 00m59s)"
    assert when(NOW - 10, NOW) == "07:59:50Z (past)"


def test_drain_in_progress_means_drain_set_and_work_left() -> None:
    assert _node("a", "MIXED", flags=("DRAIN",), jobs=(1,)).draining
    assert _node("b", "IDLE", flags=("COMPLETING", "DRAIN")).draining  # the last job is still cleaning up
    assert not _node("c", "IDLE", flags=("DRAIN",)).draining  # drained: nothing left to wait for
    assert not _node("d", "ALLOCATED", jobs=(2,)).draining


def test_drains_are_listed_soonest_first_and_foreign_ones_are_marked() -> None:
    snap = StatusReport(
        source="slurm",
        nodes=[
            _node(
                "late",
                "ALLOCATED",
                flags=("DRAIN",),
                jobs=(7,),
                reason="slurm-sidecars: scale-in",
                until=NOW + 7200,
            ),
            _node("soon", "MIXED", flags=("DRAIN",), jobs=(8, 9), reason="hardware check", until=NOW + 60),
        ],
        jobs=[],
    )
    out = render(snap, now=NOW).splitlines()
    drains = out[out.index("DRAINS IN PROGRESS") + 1 : out.index("DRAINS IN PROGRESS") + 3]
    assert drains[0].startswith("soon: waiting for job(s) 8,9, expected done 08:01:00Z")
    assert drains[0].endswith("(reason: hardware check, not set by slurm-sidecars)")
    assert drains[1].endswith("(reason: slurm-sidecars: scale-in)")
    assert out[out.index("JOBS") + 1] == "none"


def test_many_jobs_on_a_node_are_summarised() -> None:
    snap = StatusReport(source="slurm", nodes=[_node("n1", "MIXED", jobs=tuple(range(1, 10)))], jobs=None)
    row = next(line for line in render(snap, now=NOW).splitlines() if line.startswith("n1 "))
    assert row.split()[3] == "1,2,3,4,5,6,+3"
