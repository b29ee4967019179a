"""`scontrol ping` with a primary and a backup, as 26.05 printed it in the HA dev cluster (the
real-cluster side is in tests/devcluster/test_ha.py): a standby that answers is healthy, the first
controller up is the one in control."""

from __future__ import annotations

from sidecars.slurm import textformat

BOTH_UP = "Slurmctld(primary) at ctld-a is UP\nSlurmctld(backup) at ctld-b is UP\n"
PRIMARY_DOWN = (
    "Slurmctld(primary) at ctld-a is DOWN\nSlurmctld(backup) at ctld-b is UP\n"
    "*****************************************\n"
    "** RESTORE SLURMCTLD DAEMON TO SERVICE **\n"
    "*****************************************\n"
)


def test_a_backup_that_answers_is_a_standby_not_a_failure() -> None:
    ping = textformat.ping(BOTH_UP)
    assert ping.hosts() == ["ctld-a", "ctld-b"]
    assert ping.in_control == "ctld-a"
    assert (ping.role("ctld-a"), ping.role("ctld-b")) == ("in control", "standby")


def test_with_the_primary_down_the_backup_is_in_control() -> None:
    ping = textformat.ping(PRIMARY_DOWN)
    assert ping.up and ping.in_control == "ctld-b"
    assert (ping.role("ctld-a"), ping.role("ctld-b")) == ("down", "in control")


def test_no_controller_up_and_a_host_not_configured() -> None:
    ping = textformat.ping(BOTH_UP.replace("UP", "DOWN"))
    assert not ping.up and ping.in_control is None
    assert ping.role("ctld-b") == "down"
    assert ping.role("ctld-c") == "unknown"
    assert textformat.ping("").role("ctld-a") == "unknown"
