"""slurmrestd's replicas take turns at a drained restart (`--restd-turn-lease`): two real slurmrestd,
each with its config-sync, on one cluster, one Lease in the fake Kubernetes API. A change reaching
both at once is applied one replica after the other: their not-ready intervals never overlap, and at
every moment one of them is ready (the Service keeps an endpoint), while clients busy on each lose no
request. A replica that took the turn and died is passed by once its turn has not been renewed for
its duration; until then the change is pending with the holder named, never an error."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sidecars.configsync.restd.drain import DrainedRestart
from sidecars.configsync.restd.turns import Turns
from sidecars.configsync.settings import DrainSettings
from sidecars.devcluster import DevCluster
from sidecars.devcluster import restd as devrestd
from sidecars.kube import KubeClient, KubeRetry
from sidecars.protocol.configsync import RestdTurnState
from tests.configsync.restd import load
from tests.configsync.restd.harness import DRAIN_SECONDS, RestdPod, restd_pod, slurm_conf_for
from tests.fakekube import FakeKube, configuration
from tests.helpers import eventually

pytestmark = [pytest.mark.releases("slurm24", "slurm26"), pytest.mark.cluster(nodes=1, jwt=True)]

NAMESPACE, LEASE = "slurm", "slurmrestd-turn"
# a turn held across a drain and a restart on a loaded machine: renewed every third of it
TURN_SECONDS = 60.0
GONE_TURN_SECONDS = 3  # the dead replica's turn: the test waits it out
BUSY_REQUESTS = 20


@contextlib.asynccontextmanager
async def _turns(url: str, fake: FakeKube, identity: str, **kw: Any) -> AsyncIterator[Turns]:
    token = f"token-{identity}"
    fake.tokens.add(token)
    retry = KubeRetry(attempts=3, initial_wait=0.01, max_wait=0.05)
    async with KubeClient(configuration(url, token), retry=retry) as kube:
        poll = DrainSettings().poll_seconds  # the drain's own poll: no second lost at each read
        yield Turns(kube, NAMESPACE, LEASE, identity, lease_seconds=TURN_SECONDS, poll_seconds=poll, **kw)


class Readiness:
    """Every change of each pod's readiness, in the loop's order: recorded in the drainer's own
    notification, at the step it changes in (nothing runs between the change and the record)."""

    def __init__(self) -> None:
        self.drainers: dict[str, DrainedRestart] = {}
        self.changes: list[tuple[float, str, bool]] = []
        self.none_ready = 0  # moments at which no pod was ready

    def watch(self, name: str, drainer: DrainedRestart) -> None:
        self.drainers[name] = drainer
        inner = drainer.on_change

        async def changed() -> None:
            self.changes.append((asyncio.get_running_loop().time(), name, drainer.serving))
            if not any(d.serving for d in self.drainers.values()):
                self.none_ready += 1
            if inner is not None:
                await inner()

        drainer.on_change = changed

    def intervals(self, name: str) -> list[tuple[float, float]]:
        """(not ready from, ready again at) of one pod."""
        out, since = [], None
        for t, who, serving in self.changes:
            if who != name:
                continue
            if not serving:
                since = t
            elif since is not None:
                out.append((since, t))
                since = None
        return out


def _turn_state(status: dict[str, Any]) -> str | None:
    return (status["restd"]["turn"] or {}).get("state")


async def _applied(pod: RestdPod, generation: int) -> dict[str, Any]:
    """Applied, and the turn handed back (after the change is recorded: once the pod is ready again)."""
    return await pod.service.wait_until(
        lambda s: (
            s["applied"]["generation"] == generation and not s["pending"] and _turn_state(s) in ("free", None)
        ),
        DRAIN_SECONDS,
    )


async def test_replicas_drain_one_at_a_time_and_one_is_always_ready(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    token = await devrestd.token(cluster)
    seen = Readiness()
    async with (
        _turns(url, fake, "restd-a") as turns_a,
        _turns(url, fake, "restd-b") as turns_b,
        restd_pod(cluster, "restd-a", turns_a) as a,
        restd_pod(cluster, "restd-b", turns_b) as b,
    ):
        seen.watch("a", a.drainer)
        seen.watch("b", b.drainer)
        async with (
            load.clients(a.port, token, count=4, routed=lambda: a.drainer.serving) as tally_a,
            load.clients(b.port, token, count=4, routed=lambda: b.drainer.serving) as tally_b,
        ):
            await eventually(lambda: min(tally_a.ok, tally_b.ok) >= BUSY_REQUESTS, within=DRAIN_SECONDS)
            # the same ConfigMap change reaches both pods at once
            for pod in (a, b):
                pod.conf.write({"slurm.conf": slurm_conf_for(cluster, pod.target) + "MessageTimeout=15\n"})
            st_a, st_b = await _applied(a, 2), await _applied(b, 2)
            answered = (tally_a.ok, tally_b.ok)
            await eventually(
                lambda: min(tally_a.ok - answered[0], tally_b.ok - answered[1]) >= BUSY_REQUESTS,
                within=DRAIN_SECONDS,
                what="both served again",
            )
        ia, ib = seen.intervals("a"), seen.intervals("b")
        print(
            f"\n{cluster.release.name}: not ready a {[(round(s, 2), round(e, 2)) for s, e in ia]}, "
            f"b {[(round(s, 2), round(e, 2)) for s, e in ib]}; answered {tally_a.ok}+{tally_b.ok}, "
            f"dropped {tally_a.dropped}+{tally_b.dropped}, refused {tally_a.refused}+{tally_b.refused}"
        )
        assert len(ia) == len(ib) == 1, seen.changes
        (sa, ea), (sb, eb) = ia[0], ib[0]
        assert ea <= sb or eb <= sa, f"the drains overlap: a {ia}, b {ib}"
        assert seen.none_ready == 0, seen.changes
        for st in (st_a, st_b):
            assert st["restd"]["last_restart"]["ok"] and st["restd"]["last_restart"]["cut"] == 0, st
            assert st["rejected"] is None, st
        for tally in (tally_a, tally_b):
            assert (tally.dropped, tally.refused) == (0, 0), tally.words
        lease = fake.leases[(NAMESPACE, LEASE)]["spec"]
        # taken by each in turn, and handed back after each
        assert lease.get("holderIdentity") is None and lease["leaseTransitions"] == 2, lease
        assert turns_a.state == turns_b.state == "free"


async def test_a_replica_that_died_holding_the_turn_is_passed_by_once_it_expires(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    # as a replica leaves the Lease when it dies mid-turn: held, and renewed no more
    fake.leases[(NAMESPACE, LEASE)] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE, "namespace": NAMESPACE, "resourceVersion": "1"},
        "spec": {
            "holderIdentity": "restd-gone",
            "leaseDurationSeconds": GONE_TURN_SECONDS,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 4,
        },
    }
    async with _turns(url, fake, "restd-b") as turns, restd_pod(cluster, "restd-b", turns) as b:
        listener = (await b.status())["restd"]
        b.conf.write({"slurm.conf": slurm_conf_for(cluster, b.target) + "MessageTimeout=15\n"})
        waiting = await b.service.wait_until(
            # (or applied at once: what a replica that takes no turn does)
            lambda s: (
                _turn_state(s) in (RestdTurnState.WAITING, RestdTurnState.HOLDING)
                or s["applied"]["generation"] == 2
            ),
            DRAIN_SECONDS,
        )
        # pending with the holder named, never an error; the pod serves meanwhile
        turn = waiting["restd"]["turn"]
        assert turn == {
            "lease": LEASE,
            "state": RestdTurnState.WAITING,
            "holder": "restd-gone",
            "error": None,
        }, waiting
        assert waiting["rejected"] is None and waiting["applied"]["generation"] == 1, waiting
        assert waiting["restd"]["serving"] and await b.readyz() == 200
        assert listener["last_restart"] is None
        st = await _applied(b, 2)
        assert st["restd"]["last_restart"]["ok"], st
        assert st["restd"]["turn"] == {"lease": LEASE, "state": "free", "holder": None, "error": None}
        lease = fake.leases[(NAMESPACE, LEASE)]["spec"]
        assert lease.get("holderIdentity") is None and lease["leaseTransitions"] == 5, lease
        assert "MessageTimeout=15" in (b.target / "slurm.conf").read_text()
