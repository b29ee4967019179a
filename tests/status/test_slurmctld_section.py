"""`slurm-sidecars status` with several controllers: the one in control, each one's role (a standby
is a standby, not a failure), and the takeovers the control plane saw; nothing with one controller."""

from __future__ import annotations

from sidecars.operator.status import StatusReport, render

NOW = 1_800_000_000

AFTER_TAKEOVER = {
    "primary": "slurmctld-1",
    "since": "2027-01-15T07:59:00Z",
    "controllers": [{"host": "slurmctld-0", "role": "down"}, {"host": "slurmctld-1", "role": "in control"}],
    "takeovers": 1,
    "last_takeover": {"from": "slurmctld-0", "to": "slurmctld-1", "at": "2027-01-15T07:59:00Z"},
    "error": None,
}


def _section(text: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index("SLURMCTLD")
    return lines[start + 1 : lines.index("", start)]


def test_the_controller_in_control_and_the_takeover_are_shown() -> None:
    text = render(StatusReport(source="http://cp:9200", nodes=[], slurmctld=AFTER_TAKEOVER), now=NOW)
    assert _section(text) == [
        "slurmctld-1 in control since 2027-01-15T07:59:00Z",
        "  slurmctld-0: down",
        "  slurmctld-1: in control",
        "takeovers seen: 1; last: slurmctld-0 -> slurmctld-1 at 2027-01-15T07:59:00Z",
    ]


def test_a_standby_is_shown_as_one_and_a_gap_as_none_in_control() -> None:
    both = {
        **AFTER_TAKEOVER,
        "primary": "slurmctld-0",
        "controllers": [
            {"host": "slurmctld-0", "role": "in control"},
            {"host": "slurmctld-1", "role": "standby"},
        ],
        "takeovers": 0,
        "last_takeover": None,
    }
    assert _section(render(StatusReport(source="slurm", nodes=[], slurmctld=both), now=NOW))[1:] == [
        "  slurmctld-0: in control",
        "  slurmctld-1: standby",
    ]
    gap = {**both, "primary": None}
    text = render(StatusReport(source="slurm", nodes=[], slurmctld=gap), now=NOW)
    assert _section(text)[0].startswith("none in control")


def test_one_controller_has_no_section() -> None:
    assert "SLURMCTLD" not in render(StatusReport(source="slurm", nodes=[]), now=NOW)
