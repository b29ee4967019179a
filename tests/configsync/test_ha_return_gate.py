"""The return gate's decisions, peer answer by peer answer (configsync/ha_return.py): a returning pod
waits for the set the controller in control runs, says why, and only ever opens."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry

from sidecars.configsync.ha import Coordination, Peer
from sidecars.configsync.ha_return import ReturnGate

OLD, NEW, OTHER = "a" * 64, "b" * 64, "c" * 64
URL = "http://127.0.0.1:1"
BOUND = 10.0


def coordination(*peers: Peer, role: str = "down") -> Coordination:
    ha = Coordination("ctld-a", tuple(p.url for p in peers) or (URL,), CollectorRegistry())
    ha.peers = list(peers)
    ha.role = role  # type: ignore[assignment]
    return ha


def writer(applied: str | None, *, pending: bool = False) -> Peer:
    return Peer(URL, "ctld-b", "in control", applied, pending)


def test_it_waits_while_the_writer_has_a_change_in_flight_then_for_its_set() -> None:
    gate = ReturnGate()
    assert not gate.judge(coordination(writer(OLD, pending=True)), OLD, NEW, BOUND)
    assert "change in flight" in gate.why and "ctld-b" in gate.why
    # the writer ran the change: this pod holds the old set, its sources the new one
    assert not gate.judge(coordination(writer(NEW)), OLD, NEW, BOUND)
    assert gate.waits_for == NEW and "stages it once checked" in gate.why
    assert gate.judge(coordination(writer(NEW)), NEW, NEW, BOUND)
    assert gate.status() == {"open": True, "why": gate.why, "waits_for": None}
    # and it stays open, whatever a peer says later
    assert gate.judge(coordination(writer(OTHER, pending=True)), NEW, NEW, BOUND)


def test_it_says_so_when_its_sources_cannot_give_the_set_in_control() -> None:
    gate = ReturnGate()
    assert not gate.judge(coordination(writer(OTHER)), OLD, NEW, BOUND)
    assert "cannot stage the set in control" in gate.why


def test_no_controller_in_control() -> None:
    # both lost: nobody up, nothing newer to wait for
    down = Peer(URL, error="unreachable: refused")
    assert ReturnGate().judge(coordination(down), OLD, NEW, BOUND)
    # a backup in standby (the takeover window): wait for it, within the bound
    standby = Peer(URL, "ctld-b", "standby", OLD)
    gate = ReturnGate()
    assert not gate.judge(coordination(standby), OLD, OLD, BOUND)
    assert "ctld-b in standby" in gate.why
    gate.since = time.monotonic() - BOUND - 1  # the window over: no backup took control
    assert gate.judge(coordination(standby), OLD, OLD, BOUND)
    # two claim control: wait for one
    gate = ReturnGate()
    two = coordination(writer(OLD), Peer("http://127.0.0.1:2", "ctld-c", "in control", OLD))
    assert not gate.judge(two, OLD, OLD, BOUND)


def test_its_own_controller_in_control_opens_it_and_no_set_keeps_it_shut() -> None:
    assert ReturnGate().judge(coordination(writer(NEW), role="in control"), OLD, NEW, BOUND)
    gate = ReturnGate()
    assert not gate.judge(coordination(writer(OLD)), None, OLD, BOUND)
    assert gate.why == "no set synced yet"
