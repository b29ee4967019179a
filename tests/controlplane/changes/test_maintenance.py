"""Maintenance windows on real Slurm: a MAINT reservation ahead of time, drains as jobs end, the end
undoing exactly our drains, a restart of the control plane losing nothing, and bad input refused."""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sidecars.controlplane.changes.maintenance import DRAIN_PREFIX, RESERVATION_PREFIX
from sidecars.controlplane.changes.node_windows import ANNOTATION
from sidecars.devcluster import DevCluster
from sidecars.runtime.waits import within
from tests.controlplane.conftest import TOKEN, Running, control_plane, eventually
from tests.fakekube import FakeKube

CLI = str(Path(sys.executable).parent / "slurm-sidecars")


def rfc3339(seconds_from_now: float) -> str:
    when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds_from_now)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


async def window(cp: Running, name: str) -> dict[str, Any]:
    status, body = await cp.get(f"/v1/maintenance/{name}")
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def states(body: dict[str, Any]) -> dict[str, str]:
    return {n: r["state"] for n, r in body["node_states"].items()}


# the short job waits behind the long one until a backfill pass: every second here, not every 30 s
@pytest.mark.cluster(nodes=2, extra_conf="SchedulerParameters=bf_interval=1\n")
@pytest.mark.per_release("each release's scheduler and backfill around a MAINT reservation")
async def test_a_window_ahead_of_time_keeps_a_long_job_off_and_lets_a_short_one_run(
    cluster: DevCluster,
) -> None:
    async with control_plane(cluster) as cp:
        status, text = await cp.post(
            "/v1/maintenance",
            {
                "name": "fw",
                "nodes": "n1",
                "start": rfc3339(20 * 60),
                "duration": "1h",
                "reason": "BIOS update",
            },
        )
        assert status == 201, text
        resv = {r.name: r for r in await cluster.client().reservations()}
        ours = resv[(await window(cp, "fw"))["reservation"]]
        assert ours.nodes == ("n1",) and "MAINT" in ours.flags
        # the reason is kept in Slurm: in the comment where a reservation has one, else in its name
        if cluster.release.version.startswith("22."):
            assert ours.name == RESERVATION_PREFIX + "fw.BIOS%20update" and not ours.comment
        else:
            assert ours.name == RESERVATION_PREFIX + "fw" and ours.comment == "BIOS update"
        assert ours.end is not None and ours.start is not None and ours.end - ours.start == 3600
        long = await cluster.sbatch("-w", "n1", "-t", "60", wrap="sleep 300")  # would run into the window
        short = await cluster.sbatch("-w", "n1", "-t", "2", wrap="sleep 300")  # ends before it starts
        await cluster.wait_job(short, "RUNNING")
        # the long one came first and had the node free: only the reservation kept it off
        job = await cluster.wait_job(long, "PENDING")
        assert job.start_time is None
        assert "reserved" in job.state_reason.lower() or "ReqNodeNotAvail" in job.state_reason
        body = await window(cp, "fw")
        assert states(body) == {"n1": "scheduled"} and body["active"] is False
        # nothing is drained ahead of the start: the node keeps working until then
        node = await cluster.client().node("n1")
        assert node is not None and not node.state.drain
        await cluster.scancel(short)
        await cluster.scancel(long)


@pytest.mark.cluster(nodes=3)
async def test_a_busy_node_waits_a_restart_loses_nothing_and_the_end_restores_only_ours(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_workers(3)
    client = cluster.client()
    await client.drain(["n3"], "admin: bad DIMM")  # someone else's drain, inside the window
    job = await cluster.sbatch("-w", "n1", "-t", "30", wrap="sleep 300")
    await cluster.wait_job(job, "RUNNING")
    reason = DRAIN_PREFIX + "racks"
    async with control_plane(cluster, kube_url=url) as cp:
        status, text = await cp.post(
            "/v1/maintenance",
            {"name": "racks", "nodes": "n[1-3]", "start": "now", "duration": "2h", "reason": "switch swap"},
        )
        assert status == 201, text
        body = await eventually(
            lambda: window(cp, "racks"),
            lambda b: states(b) == {"n1": "waiting", "n2": "ready", "n3": "ready"},
            what="n2 drained, n1 waiting",
        )
        assert body["node_states"]["n1"]["detail"].startswith(f"waiting for job {job} (ends ")
        nodes = await client.nodes_named(["n1", "n2", "n3"])
        assert nodes["n1"].state.drain and nodes["n1"].state.busy  # draining, its job untouched
        assert {n: v.reason.text if v.reason else None for n, v in nodes.items()} == {
            "n1": reason,
            "n2": reason,
            "n3": "admin: bad DIMM",
        }
        await cp.counted("slurm_sidecars_maintenance_nodes", lambda v: v == 1, what="metric", state="waiting")
        status, st = await cp.get("/status")
        assert st["maintenance"]["windows"] == [{"name": "racks", "nodes": 3, "active": True}]
        await eventually(
            lambda: asyncio.sleep(0.05, {e["reason"] for e in fake.events}),
            lambda r: {"MaintenanceWaiting", "MaintenanceReady"} <= r,
            what="events",
        )
        waiting = [e for e in fake.events if e["reason"] == "MaintenanceWaiting"]
        assert [e["involvedObject"]["name"] for e in waiting] == ["worker-1"]

    # the control plane is gone; the window lives on in Slurm
    assert (await cluster.wait_job(job, "RUNNING")).state == "RUNNING"
    async with control_plane(cluster, kube_url=url, identity="cp-b") as cp:
        body = await window(cp, "racks")
        assert body["reason"] == "switch swap" and body["nodes"] == ["n1", "n2", "n3"]
        assert states(body)["n1"] == "waiting"
        await cluster.scancel(job)
        await eventually(
            lambda: window(cp, "racks"),
            lambda b: set(states(b).values()) == {"ready"},
            what="n1 ready once its job ended",
        )
        # an admin's reservation elsewhere is never ours to remove
        await client.create_reservation("admin-hold", ["n2"], start="now+7200", duration="60")
        # the window ends as Slurm ends it: the reservation goes, our drains are undone
        await client.run("scontrol", "update", f"reservation={body['reservation']}", "endtime=now")
        await cluster.wait_nodes(
            lambda ns: not any(n.state.drain for n in ns if n.name in {"n1", "n2"}), what="ours undrained"
        )
        after = await client.nodes_named(["n3"])
        assert after["n3"].state.drain and after["n3"].reason is not None
        assert after["n3"].reason.text == "admin: bad DIMM"
        assert (await cp.get("/v1/maintenance"))[1] == {"windows": []}
        await eventually(
            client.reservations,
            lambda rs: {r.name for r in rs} == {"admin-hold"},
            within=60,
            what="Slurm purged the ended reservation (the admin's stays)",
        )
        await client.delete_reservation("admin-hold")


# the refusals and the command's output are ours; the reservation a good window makes is tested on
# every release by the tests above
@pytest.mark.releases("slurm26")
@pytest.mark.cluster(nodes=2)
async def test_bad_windows_are_refused_and_change_nothing(cluster: DevCluster, tmp_path: Path) -> None:
    async with control_plane(cluster) as cp:
        good = {"name": "one", "nodes": "n1", "start": rfc3339(3600), "duration": "1h", "reason": "firmware"}
        assert (await cp.post("/v1/maintenance", good))[0] == 201
        refused = {
            "overlap": ({**good, "name": "two", "nodes": "n[1-2]", "start": rfc3339(5400)}, 409, "overlaps"),
            "same name": ({**good, "start": rfc3339(3 * 3600)}, 409, "exists"),
            "unknown": ({**good, "name": "x", "nodes": "n[1-2],gpu7"}, 404, "unknown nodes: gpu7"),
            "past": ({**good, "name": "x", "start": rfc3339(-3600)}, 409, "in the past"),
            "duration": ({**good, "name": "x", "start": "now", "duration": "soon"}, 422, "90m"),
            "zero": ({**good, "name": "x", "start": "now", "duration": "0m"}, 409, "at least 1m"),
            "no offset": ({**good, "name": "x", "start": "2030-01-01T00:00:00"}, 409, "offset"),
            "hostlist": ({**good, "name": "x", "nodes": "n[1-"}, 409, "hostlist"),
            # 18 characters for 10^9 names: refused from its size, before anything is expanded
            "huge": ({**good, "name": "x", "nodes": "n[0-999][0-999999]"}, 409, "more than 100000"),
            "kube name": ({**good, "name": "k8s-node-a"}, 409, "Kubernetes"),
            "reason": ({**good, "name": "x", "reason": "a=b"}, 409, "reason"),
            "missing": ({"nodes": "n2"}, 422, "missing"),
        }
        for what, (body, code, words) in refused.items():
            status, text = await cp.post("/v1/maintenance", body)
            assert status == code and words in text, (what, status, text)
        one = (await window(cp, "one"))["reservation"]
        assert one.startswith(RESERVATION_PREFIX + "one")
        assert [r.name for r in await cluster.client().reservations()] == [one]
        assert (await cp.session.delete(cp.url + "/v1/maintenance/nope")).status == 404
        assert (await cp.get("/livez"))[0] == 200

        # the command: one line on stderr and exit 2 for a refusal, 0 and a table when done
        token = tmp_path / "token"
        token.write_text(TOKEN)
        base = ["maintenance", "--control-plane", cp.url, "--token-file", str(token)]

        async def run(*args: str) -> tuple[int, str, str]:
            proc = await asyncio.create_subprocess_exec(
                CLI, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await within(proc.communicate(), 30)
            assert proc.returncode is not None
            return proc.returncode, out.decode(), err.decode()

        code, out, err = await run(
            base[0], "create", *base[1:], "--nodes", "n2", "--duration", "1x", "--reason", "r"
        )
        assert code == 2 and err.count("\n") == 1 and "duration: e.g. 90m" in err, (code, out, err)
        code, out, err = await run(base[0], "delete", *base[1:])
        assert code == 2 and "NAME" in err
        create = ["create", "cli", *base[1:], "--nodes", "n2", "--start", rfc3339(600)]
        code, out, err = await run(base[0], *create, "--duration", "30m", "--reason", "disk swap")
        assert code == 0, err
        assert "cli" in out and "n2" in out and "scheduled (starts" in out
        code, out, err = await run(base[0], "list", *base[1:])
        assert code == 0 and "one" in out and "cli" in out, (out, err)
        code, out, err = await run("status", *base[1:])
        section = out[out.index("MAINTENANCE AND UPGRADES") :]
        assert code == 0 and {"one", "cli"} <= {line.split(" ")[0] for line in section.splitlines()}, out
        code, out, err = await run(base[0], "delete", "cli", *base[1:])
        assert code == 0, err
        assert [r.name for r in await cluster.client().reservations()] == [one]
        assert not any(n.state.drain for n in await cluster.client().nodes())


@pytest.mark.cluster(nodes=3)
async def test_a_kubernetes_node_annotation_puts_its_worker_pods_nodes_in_a_window(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_node("kube-a.example")
    fake.add_node("kube-b.example", {ANNOTATION: "2020-01-01T00:00:00Z/1h"})  # over long ago: ignored
    fake.add_pod("worker-1", hostname="n1", node_name="kube-a.example")
    fake.add_pod("worker-2", hostname="n2", node_name="kube-a.example")
    fake.add_pod("worker-3", hostname="n3", node_name="kube-b.example")
    client = cluster.client()
    async with control_plane(cluster, kube_url=url) as cp:
        fake.annotate_node("kube-a.example", {ANNOTATION: f"{rfc3339(-120)}/90m"})  # started 2 min ago
        body = await eventually(
            lambda: cp.get("/v1/maintenance/k8s-kube-a-example"),
            lambda r: r[0] == 200 and set(states(r[1]).values()) == {"ready"},
            what="the annotated Node's window, its nodes drained",
        )
        assert body[1]["nodes"] == ["n1", "n2"] and body[1]["source"] == "kubernetes"
        resv = {r.name: r for r in await client.reservations()}
        ours = resv[body[1]["reservation"]]
        assert ours.end is not None and abs(ours.end - (time.time() + 88 * 60)) < 120
        nodes = await client.nodes_named(["n1", "n2", "n3"])
        assert {n for n, v in nodes.items() if v.state.drain} == {"n1", "n2"}
        # the annotation removed: the window goes, and its drains with it
        fake.annotate_node("kube-a.example", {ANNOTATION: None})
        await cluster.wait_nodes(lambda ns: not any(n.state.drain for n in ns), what="undrained")
        assert await client.reservations() == []
        # a malformed annotation changes nothing
        fake.annotate_node("kube-a.example", {ANNOTATION: "tomorrow"})
        fake.annotate_node("kube-b.example", {ANNOTATION: "now/1h"})
        await eventually(
            lambda: asyncio.sleep(0.3, cp.plane.k8s.node_windows._bad if cp.plane.k8s else set()),
            lambda bad: len(bad) == 2,
            what="both refused",
        )
        assert await client.reservations() == []


@pytest.mark.cluster(nodes=1)
@pytest.mark.per_release("how each release stores and prints a reservation's comment")
async def test_any_printable_reason_is_kept_by_slurm_on_every_release(cluster: DevCluster) -> None:
    reason = "50% done. Ünïcode / swap (rack 3) & more"
    async with control_plane(cluster) as cp:
        body = {"name": "odd", "nodes": "n1", "start": rfc3339(3600), "duration": "1h", "reason": reason}
        status, text = await cp.post("/v1/maintenance", body)
        assert status == 201, text
    # a new control plane knows the window from Slurm alone
    async with control_plane(cluster, identity="cp-b") as cp:
        read = await window(cp, "odd")
        assert read["reason"] == reason and read["nodes"] == ["n1"]
        assert (await cp.session.delete(cp.url + "/v1/maintenance/odd")).status == 200
    assert await cluster.client().reservations() == []
