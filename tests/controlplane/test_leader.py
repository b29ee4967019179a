"""Two replicas, one Lease: only the holder writes; the other takes over when the holder stops renewing."""

from __future__ import annotations

import pytest

from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import PRODUCT_LEASE_SECONDS, control_plane
from tests.fakekube import FakeKube
from tests.helpers import eventually

pytestmark = pytest.mark.cluster(nodes=2)
REASON = "slurm-sidecars: preStop"


async def test_hand_over_when_the_holder_stops_renewing(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.tokens |= {"token-a", "token-b"}
    # a holds the Lease while b starts and the test reads both: the product's Lease (a 3 s one left a
    # 2 s write margin, and a's renewal ran past it beside the hog: a stepped down before b started)
    lease = {"lease": {"name": "cp", "duration_seconds": PRODUCT_LEASE_SECONDS, "renew_seconds": 0.5}}
    async with control_plane(cluster, kube_url=url, kube_token="token-a", identity="cp-a", **lease) as a:
        await eventually(lambda: a.get("/status"), lambda r: r[1]["leader"], what="a leads")
        async with control_plane(cluster, kube_url=url, kube_token="token-b", identity="cp-b", **lease) as b:
            status, body = await b.get("/status")
            assert body["leader"] is False and body["lease_holder"] == "cp-a"
            # the follower serves reads, refuses writes and names the holder
            assert (await b.get("/v1/nodes"))[0] == 200
            status, text = await b.post("/v1/nodes/n1/drain", {"reason": REASON})
            assert status == 503 and "cp-a" in text
            assert b.sample("slurm_sidecars_leader") == 0 and a.sample("slurm_sidecars_leader") == 1

            fake.blocked.add("token-a")  # a is cut off from the API: it can no longer renew
            await eventually(
                # a steps down 2/3 of the Lease after its last renewal, b takes it once it expired
                lambda: b.get("/status"),
                lambda r: r[1]["leader"],
                within=3 * PRODUCT_LEASE_SECONDS,
                what="b takes over",
            )
            status, body = await a.get("/status")
            assert body["leader"] is False  # a stepped down before b could take over
            lease_obj = fake.leases[("slurm", "cp")]
            assert lease_obj["spec"]["holderIdentity"] == "cp-b"
            assert lease_obj["spec"]["leaseTransitions"] == 1

            assert (await b.post("/v1/nodes/n1/drain", {"reason": REASON}))[0] == 202
            assert (await a.post("/v1/nodes/n2/drain", {"reason": REASON}))[0] == 503
            await cluster.wait_node("n1", lambda n: n.state.drain, what="n1 drained by the new leader")
            node = await cluster.client().node("n2")
            assert node is not None and not node.state.drain
        # b stops gracefully and hands the Lease back; a, reconnected, takes it at once
        fake.blocked.clear()
        assert fake.leases[("slurm", "cp")]["spec"].get("holderIdentity") is None
        await eventually(lambda: a.get("/status"), lambda r: r[1]["leader"], within=15, what="a leads again")
