"""The turn's Lease itself (restd/turns.py) against the fake API server, without Slurm: created where
the manifest did not ship it, held by one replica while the other waits with the holder named, handed
back on leaving; an API that refuses (403) leaves the turn waiting with the reason, never raises."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from sidecars.configsync.main import restd_turns
from sidecars.configsync.restd.turns import Turns
from sidecars.configsync.settings import DrainSettings, Settings
from sidecars.kube import KubeClient, KubeRetry
from sidecars.protocol.configsync import RestdTurnState
from sidecars.runtime.settings import ConfigError
from sidecars.runtime.waits import within
from tests.fakekube import FakeKube, configuration, write_kubeconfig
from tests.helpers import eventually
from tests.settings import build

NAMESPACE, LEASE = "slurm", "slurmrestd-turn"
WAIT_SECONDS = 60.0  # generous: a loaded machine
DEFAULTS = DrainSettings()
POLL_SECONDS = DEFAULTS.poll_seconds  # the drain's own poll: the tests need not wait a second a read


@contextlib.asynccontextmanager
async def _turns(url: str, fake: FakeKube, identity: str) -> AsyncIterator[Turns]:
    token = f"token-{identity}"
    fake.tokens.add(token)
    retry = KubeRetry(attempts=2, initial_wait=0.01, max_wait=0.05)
    async with KubeClient(configuration(url, token), retry=retry) as kube:
        lease = DEFAULTS.turn_lease_seconds
        yield Turns(kube, NAMESPACE, LEASE, identity, lease_seconds=lease, poll_seconds=POLL_SECONDS)


class Seen:
    """What each notification showed; `until` waits for one (no polling of the state)."""

    def __init__(self, turns: Turns) -> None:
        self.turns = turns
        self.changed = asyncio.Event()

    async def notify(self) -> None:
        self.changed.set()

    async def until(self, ok: Callable[[Turns], bool]) -> None:
        async def wait() -> None:
            while not ok(self.turns):
                self.changed.clear()
                await self.changed.wait()

        await within(wait(), WAIT_SECONDS)


async def test_one_holds_the_turn_the_other_waits_naming_it(fake_kube: tuple[FakeKube, str]) -> None:
    fake, url = fake_kube
    async with _turns(url, fake, "restd-a") as a, _turns(url, fake, "restd-b") as b:
        seen_a, seen_b = Seen(a), Seen(b)
        async with a.turn(seen_a.notify):
            # no Lease shipped: created once, then taken
            assert fake.leases[(NAMESPACE, LEASE)]["spec"]["holderIdentity"] == "restd-a"
            assert a.view() == {
                "lease": LEASE,
                "state": RestdTurnState.HOLDING,
                "holder": "restd-a",
                "error": None,
            }
            took = asyncio.Event()

            async def b_turn() -> None:
                async with b.turn(seen_b.notify):
                    took.set()

            waiting = asyncio.create_task(b_turn())
            try:
                await seen_b.until(lambda t: t.state == RestdTurnState.WAITING)
                assert b.view() == {
                    "lease": LEASE,
                    "state": RestdTurnState.WAITING,
                    "holder": "restd-a",
                    "error": None,
                }
                assert not took.is_set()
            except BaseException:
                waiting.cancel()
                raise
        assert a.state == RestdTurnState.FREE
        await within(waiting, WAIT_SECONDS)  # a handed it back: b took it at once, and left
        assert took.is_set() and b.state == RestdTurnState.FREE
        spec = fake.leases[(NAMESPACE, LEASE)]["spec"]
        assert spec.get("holderIdentity") is None and spec["leaseTransitions"] == 2, spec


async def test_an_api_that_refuses_leaves_the_turn_waiting_with_the_reason(
    fake_kube: tuple[FakeKube, str],
) -> None:
    fake, url = fake_kube
    async with _turns(url, fake, "restd-a") as a:
        seen = Seen(a)
        fake.blocked.add("token-restd-a")  # e.g. an account without the rights on the Lease
        took = asyncio.Event()

        async def turn() -> None:
            async with a.turn(seen.notify):
                took.set()

        task = asyncio.create_task(turn())
        try:
            await seen.until(lambda t: t.error is not None)
            assert a.state == RestdTurnState.WAITING and not took.is_set()
            assert LEASE in str(a.error) and "403" in str(a.error), a.error
            fake.blocked.clear()
            await within(task, WAIT_SECONDS)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        assert took.is_set() and a.view() == {
            "lease": LEASE,
            "state": RestdTurnState.FREE,
            "holder": None,
            "error": None,
        }


RENEWED_TURN_SECONDS = 6.0  # renewed every 2 s: 4 s of margin for a loaded loop
RENEWAL = ("update", "leases", "token-restd-a", 200)
RENEWALS = 3  # 6 s held: a whole duration past the record the waiting replica saw first


async def _hold(turns: Turns, seen: Seen) -> None:
    async with turns.turn(seen.notify):
        pass


async def test_a_held_turn_is_renewed_and_not_passed_by(fake_kube: tuple[FakeKube, str]) -> None:
    """A turn held past its duration (a long drain) is renewed every third of it: the waiting replica
    sees it change, and does not take it."""
    fake, url = fake_kube
    async with _turns(url, fake, "restd-a") as a, _turns(url, fake, "restd-b") as b:
        a.lease_seconds = b.lease_seconds = RENEWED_TURN_SECONDS
        seen_b = Seen(b)
        async with a.turn(Seen(a).notify):
            waiting = asyncio.create_task(_hold(b, seen_b))
            try:
                await seen_b.until(lambda t: t.state == RestdTurnState.WAITING)
                since = len(fake.requests)

                def renewals() -> int:
                    return sum(
                        1 for r in fake.requests[since:] if (r.verb, r.resource, r.token, r.status) == RENEWAL
                    )

                await eventually(renewals, lambda n: n >= RENEWALS, within=WAIT_SECONDS, what="renewals")
                # held for a whole duration past what b saw first: renewed, never passed by
                assert b.state == RestdTurnState.WAITING and b.holder == "restd-a"
                assert fake.leases[(NAMESPACE, LEASE)]["spec"]["holderIdentity"] == "restd-a"
            except BaseException:
                waiting.cancel()
                raise
        await within(waiting, WAIT_SECONDS)
        assert b.state == RestdTurnState.FREE


async def test_the_flag_takes_the_turn_as_this_pod_or_refuses_to_start_without_kubernetes(
    fake_kube: tuple[FakeKube, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """config-sync's start (main.restd_turns): the Lease named by --restd-turn-lease, in $POD_NAMESPACE,
    under $POD_NAME; no Kubernetes to hold it in is a configuration error (exit 2), not "no turns";
    without the flag, or for another daemon, nothing is loaded."""
    fake, url = fake_kube
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("POD_NAME", "slurmrestd-7f9c-x2")
    monkeypatch.setenv("POD_NAMESPACE", "hpc")
    restd = DrainSettings(turn_lease=LEASE)
    settings = build(Settings, daemon="slurmrestd", restd=restd)
    async with contextlib.AsyncExitStack() as stack:
        assert await restd_turns(build(Settings, daemon="slurmrestd"), stack) is None
        assert await restd_turns(build(Settings, daemon="slurmctld", restd=restd), stack) is None
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
        with pytest.raises(ConfigError, match="--restd-turn-lease slurmrestd-turn: no Kubernetes API"):
            await restd_turns(settings, stack)
        monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kubeconfig", url)))
        turns = await restd_turns(settings, stack)
        assert turns is not None
        assert (turns.namespace, turns.name, turns.identity) == ("hpc", LEASE, "slurmrestd-7f9c-x2")
        async with turns.turn(Seen(turns).notify):
            assert fake.leases[("hpc", LEASE)]["spec"]["holderIdentity"] == "slurmrestd-7f9c-x2"
