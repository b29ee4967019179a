"""The return gate's decisions, peer answer by peer answer (configsync/ha/return_gate.py): a returning pod
waits for the set the controller in control runs, says why, and only ever opens."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sidecars.configsync.ha.coordination import Coordination, Peer, _peer_from
from sidecars.configsync.ha.return_gate import ReturnGate, handover
from sidecars.slurm.standdown import address, listening

OLD, NEW, OTHER = "a" * 64, "b" * 64, "c" * 64
URL = "http://127.0.0.1:1"
BOUND = 10.0


def coordination(
    *peers: Peer, role: str = "down", me: str = "ctld-a", conf: Path | None = None
) -> Coordination:
    env = None if conf is None else {"SLURM_CONF": str(conf)}
    ha = Coordination(me, tuple(p.url for p in peers) or (URL,), CollectorRegistry(), env=env)
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
    assert gate.status() == {"open": True, "why": gate.why, "waits_for": None, "stands_down": None}
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


def slurm_conf(tmp_path: Path, port: int = 6817) -> Path:
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        f"ClusterName=c\nSlurmctldHost=ctld-a(127.0.0.1)\nSlurmctldHost=ctld-b(127.0.0.1)\nSlurmctldPort={port}\n"
    )
    return conf


def test_a_primary_back_beside_a_backup_in_control_has_it_shut_down_before_it_starts(tmp_path: Path) -> None:
    """Slurm would hand control back to it at its start, and the backup saves its state after
    answering, as the primary reads it (26.05 can then start with no jobs): the backup goes first."""
    conf = slurm_conf(tmp_path)
    gate = ReturnGate()
    assert not gate.judge(coordination(writer(NEW), conf=conf), NEW, NEW, BOUND)
    assert gate.stands_down == "ctld-b" and "ctld-b shuts down first" in gate.why
    assert gate.status()["stands_down"] == "ctld-b" and not gate.status()["open"]
    # until it has gone, whatever a peer says
    assert not gate.judge(coordination(writer(NEW), conf=conf), NEW, NEW, BOUND)
    # a backup back beside the primary in control: no handback, it opens as before
    primary = Peer(URL, "ctld-a", "in control", NEW)
    backup = ReturnGate()
    assert backup.judge(coordination(primary, me="ctld-b", conf=conf), NEW, NEW, BOUND)
    assert backup.stands_down is None


async def test_the_gate_opens_once_nothing_listens_at_the_backups_address(tmp_path: Path) -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conf = slurm_conf(tmp_path, port)
    ha = coordination(writer(NEW), conf=conf)
    gate = ReturnGate()
    gate.judge(ha, NEW, NEW, BOUND)
    gate.asked_at = time.monotonic()  # asked already (`scontrol shutdown` needs a Slurm: the HA tests)
    try:
        assert not await gate.stand_down(ha)  # it still listens: a shutdown saves state first
    finally:
        server.close()
        await server.wait_closed()
    assert await gate.stand_down(ha)  # refused: its slurmctld ended, after its saves
    assert gate.open and "ctld-b shut down" in gate.why and "no handback" in gate.why


async def test_the_backup_asked_to_shut_down_knows_why_its_controller_went(tmp_path: Path) -> None:
    conf = slurm_conf(tmp_path)
    body = {
        "ha": {"role": "down", "controller": "ctld-a", "return": {"open": False, "stands_down": "ctld-b"}},
        "applied": {"sha256": NEW},
    }
    back = _peer_from(URL, body)
    assert back.stands_down == "ctld-b" and back.error is None
    forged = _peer_from(URL, {**body, "ha": {**body["ha"], "return": {"stands_down": "x\ny"}}})
    assert forged.error is not None
    ha = coordination(back, me="ctld-b", conf=conf)

    async def asked_role() -> str:
        return "down"

    async def asked_peers() -> list[Peer]:
        return [back]

    ha.refresh_role = asked_role  # type: ignore[assignment,method-assign]
    ha.refresh_peers = asked_peers  # type: ignore[method-assign]
    why = await handover(ha)
    assert why is not None and "ctld-a came back and asked ctld-b to shut down" in why


HOSTS = "SlurmctldHost=a(10.0.0.1)\nSlurmctldHost=b(10.0.0.2)\n"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (HOSTS + "SlurmctldPort=7000-7003\n", ("10.0.0.2", 7000)),
        ("SlurmctldHost=a\nSlurmctldHost=b\n", ("b", 6817)),
    ],
)
def test_a_controllers_address(text: str, where: tuple[str, int]) -> None:
    assert address(text, "b") == where


async def test_a_port_nobody_listens_on_is_refused(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, not listening: refused
        conf = slurm_conf(tmp_path, s.getsockname()[1])
        assert await listening("ctld-b", 5, {"SLURM_CONF": str(conf)}) == "refused"
