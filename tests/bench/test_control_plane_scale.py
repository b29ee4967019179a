"""bench/control_plane_scale.py's long polls (P5): its clients keep within the server's per-address
cap, so all of them are parked and the bench runs to its end; from one address, the cap's refusals
are counted (P5-cap), never waited for. At a small size, against the real API server with
production's limits."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from control_plane_scale import long_polls, sources_for, synthetic

from sidecars.controlplane.fleet.snapshot import FleetView
from sidecars.runtime import http
from sidecars.slurm import SlurmClient, jsonformat, squeueformat


def test_the_polls_spread_over_addresses_each_within_the_cap() -> None:
    limits = http.ServerLimits()
    cap = limits.max_connections_per_source
    for polls in (1, cap, cap + 1, 2000, limits.max_connections):
        sources = sources_for(polls, limits)
        assert len(set(sources)) == len(sources)
        assert all(s.startswith("127.") and s != "127.0.0.1" for s in sources)
        # long_polls gives poll i the address i % len(sources): the busiest holds ceil(polls / n)
        assert -(-polls // len(sources)) <= cap, (polls, len(sources))


def fleet_of(nodes: int, jobs: int) -> tuple[FleetView, dict[str, object]]:
    node_text, _, brief = synthetic(nodes, jobs, int(time.time()))
    fleet = FleetView(SlurmClient())
    nodes, jobs_read = jsonformat.nodes(["scontrol"], node_text), squeueformat.job_summaries(brief)
    fleet.publish(fleet.assemble(nodes, jobs_read))
    return fleet, {"node_names": sorted(fleet.snapshot.nodes), "node_text": node_text, "job_text": brief}


async def test_every_poll_is_parked_and_delivered_when_more_than_one_address_may_hold() -> None:
    limits = http.ServerLimits()
    polls = limits.max_connections_per_source + 8  # more than one address may hold
    fleet, texts = fleet_of(20, 60)
    got = await long_polls(fleet, polls, sources=sources_for(polls, limits), drop=0, **texts)
    assert not got.refused
    assert len(got.seconds) == polls


async def test_from_one_address_the_cap_is_counted_not_waited_for() -> None:
    cap = http.ServerLimits().max_connections_per_source
    fleet, texts = fleet_of(20, 60)
    got = await long_polls(fleet, cap + 8, sources=["127.0.2.1"], drop=0, **texts)
    assert len(got.seconds) == cap
    assert got.refused.total() == 8
