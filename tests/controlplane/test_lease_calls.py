"""The Lease costs one call per renewal (client-go's fast path), and a write by someone else since
our last renewal is still seen: the 409 makes the leader read, and step down."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from sidecars.controlplane.leader import LeaderElector
from sidecars.kube import KubeClient
from sidecars.kube.client import KubeRetry
from sidecars.runtime.waits import within
from tests.fakekube import FakeKube, configuration
from tests.helpers import eventually


@contextlib.asynccontextmanager
async def elector(url: str, **timing: Any) -> AsyncIterator[LeaderElector]:
    timing = {"lease_seconds": 30.0, "renew_seconds": 0.05, **timing}
    async with KubeClient(configuration(url), retry=KubeRetry(attempts=2, initial_wait=0.01)) as kube:
        lead = LeaderElector(kube, "slurm", "cp", "cp-a", **timing)
        stop = asyncio.Event()
        task = asyncio.create_task(lead.run(stop), name="leader")
        try:
            yield lead
        finally:
            stop.set()
            await within(task, 10)


async def renewals(fake: FakeKube) -> int:
    return fake.calls()[("update", "leases")]


async def test_a_renewal_is_one_write_and_no_read(fake_kube: tuple[FakeKube, str]) -> None:
    fake, url = fake_kube
    async with elector(url) as lead:
        await eventually(lambda: renewals(fake), lambda n: n >= 10, what="10 renewals")
        assert lead.is_leader
        calls = fake.calls()
    # one read (404) and the create to take it; then every renewal a single update, read-free
    assert calls[("get", "leases")] == 1, calls
    assert calls[("create", "leases")] == 1


async def test_a_lease_taken_since_our_renewal_is_read_and_followed(fake_kube: tuple[FakeKube, str]) -> None:
    fake, url = fake_kube
    async with elector(url) as lead:
        await eventually(lambda: renewals(fake), lambda n: n >= 2, what="renewals")
        lease = fake.leases[("slurm", "cp")]
        # another replica wrote the Lease (e.g. it took it over while we were cut off)
        lease["spec"]["holderIdentity"] = "cp-b"
        lease["metadata"]["resourceVersion"] = "999999"

        async def following() -> bool:
            return not lead.is_leader and lead.holder == "cp-b"

        await eventually(following, bool, what="cp-a follows cp-b")
    assert fake.answered("PUT", "/leases/cp", 409)  # the fast path's renewal was refused
    assert fake.leases[("slurm", "cp")]["spec"]["holderIdentity"] == "cp-b"  # and nothing overwritten


async def test_a_failed_renewal_is_retried_soon_and_the_lease_kept(fake_kube: tuple[FakeKube, str]) -> None:
    fake, url = fake_kube
    # the leader steps down 4 s after its last renewal; it renews every 1.5 s when all is well. The
    # six failures and the success after them, retried soon, take well under a second on a quiet
    # machine and leave a loaded one room; retried only at the next renewal, they would take 6 s
    async with elector(url, lease_seconds=6.0, renew_seconds=1.5, retry_seconds=0.1) as lead:
        await eventually(lambda: renewals(fake), lambda n: n >= 1, what="a renewal")
        seen: list[bool] = []
        lead.changed.clear()
        fake.inject("PUT", "/leases/cp", 500, times=6)  # three renewals fail, two attempts each
        await eventually(
            lambda: len(fake.answered("PUT", "/leases/cp", 200)), lambda n: n >= 3, within=20, what="renewed"
        )
        seen.append(lead.changed.is_set())
    assert len(fake.answered("PUT", "/leases/cp", 500)) == 6
    assert seen == [False] and lead.is_leader is False  # never stepped down (released at the end)


async def test_a_renewal_that_stalls_past_the_deadline_steps_the_leader_down(
    fake_kube: tuple[FakeKube, str],
) -> None:
    fake, url = fake_kube
    async with elector(url, lease_seconds=3.0, renew_seconds=0.5, retry_seconds=0.1) as lead:
        await eventually(lambda: renewals(fake), lambda n: n >= 1, what="a renewal")
        lead.changed.clear()
        # the API server holds the renewal well past the 2 s deadline: the leader steps down at the
        # deadline (a loaded machine's late timers given room), never when the answer comes
        fake.stall("PUT", "/leases/cp", 10.0, times=1)
        await eventually(lead.changed.is_set, within=8, what="stepped down by the deadline")
        assert not lead.is_leader


async def test_slow_renewals_keep_the_leader_writing(fake_kube: tuple[FakeKube, str]) -> None:
    """A renewal is due `renew_seconds` after the last one was sent, not after its answer: the write
    deadline runs from the sending, so an API server slow to answer costs the margin once, not
    twice. Here the deadline is 10 s after each sending and every answer comes 4 s late: renewals
    sent 3 s after the last answer arrive 7 s apart and are answered 11 s apart, past the deadline
    (the leader stopped writing, or stepped down); sent on time, they are answered 4 s apart."""
    fake, url = fake_kube
    lease, renew, late = 15.0, 3.0, 4.0
    async with elector(url, lease_seconds=lease, renew_seconds=renew) as lead:
        await eventually(lambda: lead.is_leader, what="leading")
        start = len(fake.answered("PUT", "/leases/cp"))
        fake.stall("PUT", "/leases/cp", late, times=1000)
        lost: list[float] = []
        began = time.monotonic()

        def look() -> int:
            if not lead.is_leader:
                lost.append(round(time.monotonic() - began, 2))
            return len(fake.answered("PUT", "/leases/cp"))

        # until the fourth slow renewal arrives: three answered on the cadence under test
        await eventually(look, lambda n: n >= start + 4, within=2 * lease, what="four slow renewals")
        assert not lost, f"not writing {len(lost)} times, first {lost[0]} s after the API server slowed"
