"""A Slurm state that should hold config changes is one hold rule (one class implementing
`holds.HoldRule`) and one line in the list of rules. The rule here, written for this test only,
holds every change while a Slurm reservation named `config-freeze` exists: on a real slurmctld the
change is held with the rule's reason in /status, /history, the metrics and an Event, and applies
once the reservation is gone. Nothing else of config-sync knows of it."""

from __future__ import annotations

import aiohttp

from sidecars.configsync import holds
from sidecars.configsync.holds import Change, Hold
from sidecars.devcluster import DevCluster
from sidecars.protocol.configsync import ConfigOutcome
from sidecars.protocol.events import EventReason
from sidecars.slurm import SlurmError
from tests.configsync.harness import config_sync, set_sha
from tests.helpers import eventually

FREEZE = "config-freeze"


class ReservationFreeze:
    name = "reservation_freeze"
    outcome = ConfigOutcome.HELD
    event = EventReason.CONFIG_HELD
    again = True  # the reservation may go at any time: judged again at every pass

    async def holds(self, change: Change) -> Hold | None:
        try:
            names = {r.name for r in await change.client.reservations()}
        except SlurmError as exc:  # cannot tell: say so and hold
            return Hold(f"held: cannot tell whether reservation {FREEZE} exists: {exc.message}")
        return Hold(f"held: reservation {FREEZE} freezes the configuration") if FREEZE in names else None


RULES = (*holds.RULES, ReservationFreeze)  # the one line that registers it


async def test_a_new_hold_rule_holds_a_change_on_real_slurm(cluster: DevCluster) -> None:
    client = cluster.client()
    node = (await client.nodes())[0].name
    async with config_sync(cluster, hold_rules=[rule() for rule in RULES]) as sync:
        await client.create_reservation(FREEZE, [node])
        changed = {**sync.good(), "slurm.conf": sync.good()["slurm.conf"] + b"# held by a freeze\n"}
        sync.config.write(changed)
        st = await sync.wait(set_sha(changed), key="rejected")
        assert st["rejected"]["held_by"] == "reservation_freeze"
        assert FREEZE in st["rejected"]["reason"] and st["applied"]["sha256"] != set_sha(changed)
        assert sync.target_sha() != set_sha(changed)  # nothing reached slurmctld's directory
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{sync.running.port}/history") as r:
            newest = (await r.json())["generations"][0]
        assert newest["outcome"] == "held" and FREEZE in newest["reason"] and newest["generation"] is None
        await eventually(
            lambda: sync.metric("slurm_sidecars_config_held", rule="reservation_freeze"),
            lambda v: v == 1,
            what="the held gauge of the new rule",
        )
        await eventually(
            lambda: sync.metric("slurm_sidecars_config_applies_total", result="held"),
            lambda v: v == 1,
            what="the held change counted",
        )
        assert any(r == EventReason.CONFIG_HELD and FREEZE in m for r, m, _ in sync.events.events)
        # the shipped rules stand beside it, their gauges at 0
        assert await sync.metric("slurm_sidecars_config_held", rule="jobs") == 0
        # the freeze ends: the held set is judged again (a rule's state may change) and applies
        await client.delete_reservation(FREEZE)
        sync.service.wake()
        st = await sync.wait(set_sha(changed), within=sync.settings.rehash_seconds + 60)
        assert st["rejected"] is None and sync.target_sha() == set_sha(changed)
        await eventually(
            lambda: sync.metric("slurm_sidecars_config_held", rule="reservation_freeze"),
            lambda v: v == 0,
            what="the held gauge back at 0",
        )
