"""The drains in progress are recorded once: the page's list (every drained node still busy, ours
or not) and the fast refresh's (only those we wrote) are one record, so they cannot disagree."""

from __future__ import annotations

from sidecars.controlplane.fleet import DrainClock
from tests.helpers import fleet_node, fleet_snapshot


def test_ours_are_the_drains_we_wrote_until_their_work_ends() -> None:
    now = [100.0]
    clock = DrainClock(clock=lambda: now[0])
    clock.written({"n1"})
    assert clock.ours == {"n1"} and set(clock.started) == {"n1"}  # fast from the write on
    now[0] = 105.0
    clock.observe(
        fleet_snapshot(
            [
                fleet_node("n1", drained=True, busy=True),
                fleet_node("n2", drained=True, busy=True, reason="admin"),
            ]
        )
    )
    assert clock.started == {"n1": 100.0, "n2": 105.0}  # the page shows both, each from its start
    assert clock.ours == {"n1"}  # an admin's drain never makes us refresh fast
    now[0] = 110.0
    clock.observe(fleet_snapshot([fleet_node("n1", drained=True), fleet_node("n2", drained=True, busy=True)]))
    assert clock.ours == set() and set(clock.started) == {"n2"}
    assert list(clock.done) == [{"node": "n1", "started_at": 100.0, "done_at": 110.0}]


def test_a_write_the_next_snapshot_does_not_show_drained_is_forgotten() -> None:
    clock = DrainClock(clock=lambda: 1.0)
    clock.written({"n1"})  # an undrain, or a drain that lost a race with an admin's resume
    clock.observe(fleet_snapshot([fleet_node("n1")]))
    assert clock.ours == set() and clock.started == {} and not clock.done
