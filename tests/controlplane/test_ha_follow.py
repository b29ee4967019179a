"""The control plane beside two controllers: it follows the one in control, reports a backup as a
standby (not a failure), counts and tells each takeover once, and a drain asked around a takeover
(a killed primary, `scontrol takeover`) is still written, once, and the job on the node lives on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sidecars.controlplane.service import ControlPlaneService
from sidecars.devcluster import DevCluster
from sidecars.operator.status import controllers
from sidecars.operator.status.settings import StatusSettings
from sidecars.slurm import Controllers, Node
from tests.controlplane.conftest import PRODUCT_LEASE_SECONDS, TOKEN, Running, control_plane
from tests.fakekube import FakeKube
from tests.helpers import eventually

HA = {"nodes": 1, "controllers": 2, "slurmctld_timeout_seconds": 5}
pytestmark = [pytest.mark.releases("slurm22", "slurm24", "slurm26"), pytest.mark.cluster(**HA)]
REASON = "slurm-sidecars: ha test"


async def _slurmctld(cp: Running) -> dict[str, Any]:
    status, body = await cp.get("/status")
    assert status == 200, body
    found: dict[str, Any] = body["controllers"]
    return found


def _follow(cluster: DevCluster) -> Callable[[ControlPlaneService], None]:
    """Its copies of slurm.conf where the release's commands see them (a chroot sees only the
    cluster's directory), as a pod's TMPDIR would be."""

    def prepare(plane: ControlPlaneService) -> None:
        plane.slurm.controllers = Controllers({**cluster.env, "TMPDIR": str(cluster.dir)})

    return prepare


def _roles(s: dict[str, Any]) -> dict[str, str]:
    return {c["host"]: c["role"] for c in s["controllers"]}


def _takeover_events(fake: FakeKube) -> list[dict[str, Any]]:
    return [e for e in fake.events if e["reason"] == "SlurmctldTakeover"]


async def _drain_across(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str], move: Callable[[], Awaitable[object]]
) -> None:
    fake, url = fake_kube
    async with control_plane(cluster, url, prepare=_follow(cluster), pod_name="slurmctld-0") as cp:
        # a healthy backup is a standby, not a failure: ready, and named as such
        before = await eventually(
            lambda: _slurmctld(cp), lambda s: s["primary"] == "ctld-a", what="ctld-a in control"
        )
        assert _roles(before) == {"ctld-a": "in control", "ctld-b": "standby"}, before
        assert before["takeovers"] == 0 and before["last_takeover"] is None
        assert (await cp.get("/readyz"))[0] == 200
        # /status reads the client's view; the gauge is set at the plane's own check: wait for it
        await eventually(
            lambda: tuple(
                cp.sample("slurm_sidecars_slurmctld_primary", host=h) for h in ("ctld-a", "ctld-b")
            ),
            lambda seen: seen == (1, 0),
            what="the primary gauge naming ctld-a",
        )

        job = await cluster.sbatch("-w", "n1", wrap="sleep 300")
        await cluster.wait_job(job, "RUNNING")
        await cluster.job_state_saved(job)  # what a backup recovers is only what was saved
        # the drain is asked, then control moves before (or while) it is written
        status, text = await cp.post("/v1/nodes/n1/drain", {"reason": REASON})
        assert status == 202, text
        await move()
        await cluster.wait_primary("ctld-b", timeout=60)

        def ours(n: Node) -> bool:
            return n.state.drain and n.reason is not None and n.reason.text == REASON

        await cluster.wait_node("n1", ours, timeout=60)
        after = await eventually(
            lambda: _slurmctld(cp), lambda s: s["primary"] == "ctld-b", within=60, what="ctld-b in /status"
        )
        assert after["controllers"][0] == {"host": "ctld-a", "role": "down"}, after
        assert after["last_takeover"]["from"] == "ctld-a" and after["last_takeover"]["to"] == "ctld-b"
        await eventually(lambda: _takeover_events(fake), what="the takeover's Event")
        # a few more checks of the controllers: still one takeover, one Event
        await eventually(lambda: cp.plane.drains.pending, lambda p: not p, what="no drain pending")
        for _ in range(3):
            await cp.plane.slurmctld.check()
        assert (await _slurmctld(cp))["takeovers"] == 1
        assert cp.sample("slurm_sidecars_slurmctld_takeovers_total", host="ctld-b") == 1
        assert cp.sample("slurm_sidecars_slurmctld_primary", host="ctld-b") == 1
        assert cp.sample("slurm_sidecars_slurmctld_primary", host="ctld-a") == 0
        events = _takeover_events(fake)
        assert len(events) == 1, events
        assert events[0]["involvedObject"]["name"] == "slurmctld-0"
        assert "ctld-b took control from ctld-a" in events[0]["message"]
        # written once (or found drained already after a lost answer): never failed, never dropped
        assert cp.sample("slurm_sidecars_drain_requests_total", action="drain", result="failed") == 0
        assert cp.sample("slurm_sidecars_drain_requests_total", action="drain", result="written") <= 1
        # `slurm-sidecars status --control-plane` says the same
        shown = await controllers.from_control_plane(StatusSettings(control_plane=cp.url, token=TOKEN))
        assert shown is not None and shown["primary"] == "ctld-b" and shown["takeovers"] == 1, shown
        # the drain waits for the job: it still runs on the new primary
        assert (await cluster.wait_job(job, "RUNNING")).state == "RUNNING"
        # and the commands now go to ctld-b first
        env = cp.plane.slurm.controllers.env(cluster.env) if cp.plane.slurm.controllers else None
        assert env is not None and env["SLURM_CONF"] != cluster.env["SLURM_CONF"]
        with open(env["SLURM_CONF"]) as f:
            hosts = [ln for ln in f.read().splitlines() if ln.startswith("SlurmctldHost=")]
        assert [h.split("=", 1)[1].split("(")[0] for h in hosts] == ["ctld-b", "ctld-a"]
        await cluster.scancel(job)


@pytest.mark.timeout(240)
@pytest.mark.per_release(
    "each release's backup takes control at its own pace and answers its own way meanwhile"
)
async def test_a_drain_asked_as_the_primary_is_killed_is_written_on_the_backup(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    await _drain_across(cluster, fake_kube, lambda: cluster.kill_controller("ctld-a"))


@pytest.mark.timeout(240)
@pytest.mark.per_release("each release's `scontrol takeover` and what its controllers say meanwhile")
async def test_a_drain_asked_at_a_takeover_is_written_and_the_move_told_once(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    await _drain_across(cluster, fake_kube, cluster.takeover)


@pytest.mark.timeout(240)
@pytest.mark.per_release("each release's handback (26.05 freezes ~30 s) and how a standby answers")
async def test_a_restarted_primary_is_a_standby_until_it_takes_control_back(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    async with control_plane(cluster, url, prepare=_follow(cluster), pod_name="slurmctld-0") as cp:
        await eventually(lambda: _slurmctld(cp), lambda s: s["primary"] == "ctld-a", what="ctld-a in control")
        await cluster.kill_controller("ctld-a")
        await cluster.wait_primary("ctld-b", timeout=60)
        await eventually(lambda: _slurmctld(cp), lambda s: s["primary"] == "ctld-b", within=60, what="ctld-b")
        await cluster.start_controller("ctld-a")
        # it answers pings at once, and serves only once it took control back (about 30 s on 24.11
        # and 26.05, at once on 22.05): until then it is a standby, and ctld-b is still in control
        seen: list[dict[str, Any]] = []

        async def look() -> dict[str, Any]:
            s = await _slurmctld(cp)
            seen.append({"primary": s["primary"], "roles": _roles(s), "serving": await cluster.primary()})
            return s

        await eventually(look, lambda s: s["primary"] == "ctld-a", within=120, every=0.5, what="ctld-a back")
        for view in seen[:-1]:
            # never ahead of Slurm: while ctld-b served, /status said ctld-b (or none, in a gap)
            if view["serving"] == "ctld-b":
                assert view["primary"] in {"ctld-b", None}, seen
        after = await _slurmctld(cp)
        assert _roles(after) == {"ctld-a": "in control", "ctld-b": "standby"}, after
        assert after["takeovers"] == 2 and after["last_takeover"]["to"] == "ctld-a", after
        # /status reads the client's own view; the metric is counted at the plane's next check
        await eventually(
            lambda: cp.sample("slurm_sidecars_slurmctld_takeovers_total", host="ctld-a"),
            lambda n: n >= 1,
            what="the move back counted",
        )
        assert cp.sample("slurm_sidecars_slurmctld_takeovers_total", host="ctld-a") == 1
        assert cp.sample("slurm_sidecars_slurmctld_takeovers_total", host="ctld-b") == 1
        await eventually(lambda: len(_takeover_events(fake)) == 2, what="two Events, one per move")
        await cluster.wait_primary("ctld-a")
        for _ in range(3):
            await cp.plane.slurmctld.check()
        assert len(_takeover_events(fake)) == 2


@pytest.mark.timeout(240)
async def test_two_control_planes_tell_a_takeover_once(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    """One control plane per controller pod, one Lease: both see the move and count it, only the
    holder writes the Event."""
    fake, url = fake_kube
    fake.tokens |= {"token-a", "token-b"}
    lease = {"lease": {"name": "cp"}, "prepare": _follow(cluster)}
    async with (
        control_plane(cluster, url, "token-a", identity="cp-a", pod_name="slurmctld-0", **lease) as a,
        control_plane(cluster, url, "token-b", identity="cp-b", pod_name="slurmctld-1", **lease) as b,
    ):
        await eventually(lambda: a.plane.leader.is_leader, what="cp-a holds the Lease")
        for cp in (a, b):
            await eventually(lambda cp=cp: _slurmctld(cp), lambda s: s["primary"] == "ctld-a", what="ctld-a")
        await cluster.takeover()
        for cp in (a, b):
            await eventually(
                lambda cp=cp: _slurmctld(cp), lambda s: s["takeovers"] == 1, within=60, what="the move seen"
            )
            # /status reads the client's count, which any command's re-learning moves; the counter
            # follows at the plane's own check
            await eventually(
                lambda cp=cp: cp.sample("slurm_sidecars_slurmctld_takeovers_total", host="ctld-b"),
                lambda n: n == 1,
                what="the takeover counted",
            )
        events = await eventually(lambda: _takeover_events(fake), what="the Event")
        for _ in range(3):
            await a.plane.slurmctld.check()
            await b.plane.slurmctld.check()
        events = _takeover_events(fake)
        assert len(events) == 1, events
        assert events[0]["involvedObject"]["name"] == "slurmctld-0"  # the holder's pod
        assert not b.plane.leader.is_leader


def _labelled(fake: FakeKube) -> set[str]:
    return {
        p["metadata"]["name"]
        for p in fake.pods.values()
        if p["metadata"].get("labels", {}).get("slurm-sidecars.io/control-plane") == "leader"
    }


@pytest.mark.timeout(240)
@pytest.mark.releases("slurm26")  # Kubernetes' side only: one release shows it
async def test_the_lease_holders_pod_alone_carries_the_leader_label(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    """The agents' Service selects it: one control plane per controller pod, the one that writes."""
    fake, url = fake_kube
    fake.tokens |= {"token-a", "token-b"}
    for name in ("slurmctld-0", "slurmctld-1"):
        fake.add_pod(name, labels={"app.kubernetes.io/name": "slurmctld"}, owner_kind="StatefulSet")
    # the product's Lease: a 3 s one left a holder 2 s to write after each renewal, which a loaded
    # machine's slow renewal eats (cp-b takes it when cp-a, leaving, releases it: no expiry waited)
    both = {"lease": {"name": "cp", "duration_seconds": PRODUCT_LEASE_SECONDS}, "leader_label": True}
    async with control_plane(cluster, url, "token-a", identity="cp-a", pod_name="slurmctld-0", **both) as a:
        await eventually(lambda: a.plane.leader.is_leader, what="cp-a holds the Lease")
        async with control_plane(
            cluster, url, "token-b", identity="cp-b", pod_name="slurmctld-1", **both
        ) as b:
            await eventually(lambda: _labelled(fake), lambda s: s == {"slurmctld-0"}, what="slurmctld-0")
            assert a.plane.holder_label is not None and b.plane.holder_label is not None
            patches = fake.calls()[("patch", "pods")]
            for _ in range(3):  # as it should be: no write by the holder, none by the follower
                await a.plane.holder_label.sync()
                await b.plane.holder_label.sync()
            assert fake.calls()[("patch", "pods")] == patches
            assert _labelled(fake) == {"slurmctld-0"} and not b.plane.leader.is_leader
        # cp-b gone: its label (none) stays none; cp-a keeps its own
        assert _labelled(fake) == {"slurmctld-0"}
    async with control_plane(cluster, url, "token-b", identity="cp-b", pod_name="slurmctld-1", **both) as b:
        # cp-a stopped (and could not take its label off: it no longer held the Lease)
        await eventually(lambda: b.plane.leader.is_leader, within=30, what="cp-b holds the Lease")
        await eventually(lambda: _labelled(fake), lambda s: s == {"slurmctld-1"}, what="the label moved")
