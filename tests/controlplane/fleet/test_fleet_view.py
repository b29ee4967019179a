"""The fleet view from a real Slurm: served on /v1/, long polls wake on a change, a token is required."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from sidecars.devcluster import DevCluster
from sidecars.runtime.waits import within
from tests.controlplane.conftest import TOKEN, control_plane
from tests.helpers import eventually

pytestmark = pytest.mark.cluster(nodes=3)


async def test_nodes_jobs_and_long_poll(cluster: DevCluster) -> None:
    async with control_plane(cluster) as cp:
        status, nodes = await cp.get("/v1/nodes")
        assert status == 200
        assert sorted(n["name"] for n in nodes) == ["n1", "n2", "n3"]
        assert all(set(n) == {"name", "state", "flags", "reason", "jobs", "busy_until"} for n in nodes)
        assert {n["state"] for n in nodes} == {"IDLE"} and all(n["busy_until"] is None for n in nodes)

        # a long poll on the current version is held until something changes (a node still settling
        # right after start-up may change once first: then poll again on the newer version)
        for _ in range(5):
            version = (await cp.get("/v1/nodes/n1"))[1]["version"]
            poll = asyncio.create_task(cp.get(f"/v1/nodes/n1?version={version}&wait=20"))
            await asyncio.sleep(0.6)
            if not poll.done():
                break
            await poll
        assert not poll.done()
        job = await within(cluster.sbatch("-w", "n1", "-t", "5", wrap="sleep 300"), 30)
        started = time.monotonic()
        status, changed = await within(poll, 20)
        assert status == 200 and changed["version"] != version
        # the poll may have woken for another change first (the node is read just before the jobs, so
        # one snapshot can show the job on a node still IDLE); both show within a few refreshes
        node = await eventually(
            lambda: cp.get("/v1/nodes/n1"),
            lambda r: job in r[1]["jobs"] and r[1]["state"] in {"ALLOCATED", "MIXED"},
            what="job on n1",
        )
        running = await cluster.wait_job(job, "RUNNING")
        assert running.start_time is not None
        assert node[1]["busy_until"] == running.start_time + 300
        assert time.monotonic() - started < 15

        # an expired wait answers with the current view and version
        status, same = await cp.get(f"/v1/nodes/n2?version={node[1]['version']}&wait=0.3")
        assert status == 200 and same["name"] == "n2"

        # two Slurm reads per refresh, whatever the number of readers
        def counts() -> tuple[float, float]:
            commands = sum(
                cp.sample("slurm_sidecars_slurm_commands_total", command=c, result="ok")
                for c in ("scontrol show", "sinfo", "squeue")
            )
            return cp.sample("slurm_sidecars_fleet_refreshes_total", result="ok"), commands

        refreshes, commands = counts()
        await asyncio.gather(*(cp.get("/v1/nodes/n2") for _ in range(50)))
        refreshes2, commands2 = counts()
        # the 50 readers cost Slurm nothing: only the refreshes (2 commands each, one maybe in flight) ran
        assert commands2 - commands <= 2 * (refreshes2 - refreshes) + 2


async def test_bad_requests_get_clear_4xx(cluster: DevCluster) -> None:
    async with control_plane(cluster) as cp:
        assert (await cp.get("/v1/nodes/nope"))[0] == 404
        for query in ("version=x", "wait=-1", "wait=nan", "wait=inf", "version=1&wait=abc"):
            status, body = await cp.get(f"/v1/nodes/n1?{query}")
            assert status == 400, query
            assert "error" in body
        status, body = await cp.post("/v1/nodes/n1/drain", {"reason": "maintenance"})
        assert status == 422 and "slurm-sidecars:" in body
        async with cp.session.post(cp.url + "/v1/nodes/n1/drain", data=b"{not json") as r:
            assert r.status == 400
        async with cp.session.post(cp.url + "/v1/nodes/n1/drain", data=b"x" * 100_000) as r:
            assert r.status == 413
        assert (await cp.post("/v1/nodes/nope/drain", {"reason": "slurm-sidecars: x"}))[0] == 404
        assert (await cp.post("/v1/nodes/n1/report", {"pod_name": "w", "registered": "yes"}))[0] == 422
        # what the document forbids the server refuses, saying what was wrong
        for path, body, said in (
            ("drain", {"reason": "slurm-sidecars: x", "reasn": "typo"}, "unknown properties 'reasn'"),
            ("drain", {"reason": "slurm-sidecars: x\nsecond line"}, "slurm-sidecars:"),
            ("undrain", {"reason": "slurm-sidecars: " + "x" * 241}, "at most 256 characters"),
            ("report", {"pod_namespace": "", "pod_name": "", "registered": True}, "pod_namespace"),
            ("report", {"pod_namespace": "s", "pod_name": "p", "registered": True, "x": 1}, "'x'"),
        ):
            status, text = await cp.post(f"/v1/nodes/n1/{path}", body)
            assert status == 422 and said in text, (path, body, status, text)
        for raw in (b'{"reason": NaN}', b"[" * 5000 + b"]" * 5000, b'{"reason": "slurm-sidecars: \\ud800"}'):
            async with cp.session.post(cp.url + "/v1/nodes/n1/drain", data=raw) as r:
                assert r.status == 400, (raw[:40], r.status, await r.text())
        for query in ("version=%201", "version=%2B1", "version=-1", "wait=1_0", "wait=%201"):
            assert (await cp.get(f"/v1/nodes/n1?{query}"))[0] == 400, query
        assert (await cp.get("/v1/nodes/n1%0A"))[0] == 400  # Python's `$` would let a final newline by
        status, body = await cp.get("/v1/nodes/n1?version=0&wait=61")  # more than the cap: cut to it
        assert status == 200 and body["name"] == "n1"
        async with cp.session.head(cp.url + "/v1/nodes") as r:  # the document offers no HEAD
            assert r.status == 405
        status, _ = await cp.post(
            "/v1/nodes/n9/report",
            {"pod_namespace": "slurm", "pod_name": "w9", "registered": False, "detail": "never registered"},
        )
        assert status == 204  # a node absent from Slurm may report: that is the point


async def test_401_without_or_with_a_wrong_token(cluster: DevCluster) -> None:
    async with control_plane(cluster) as cp, aiohttp.ClientSession() as anon:
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": TOKEN},
            {"Authorization": f"Bearer {TOKEN}x"},
        ):
            for method, path in (
                ("GET", "/v1/nodes"),
                ("GET", "/v1/nodes/n1"),
                ("GET", "/v1/scale-in-order"),
                ("POST", "/v1/nodes/n1/drain"),
                ("GET", "/v1/openapi.json"),
            ):
                async with anon.request(
                    method, cp.url + path, headers=headers, json={"reason": "slurm-sidecars: x"}
                ) as r:
                    assert r.status == 401, (headers, path)
                    assert TOKEN not in await r.text()
        async with anon.get(cp.url + "/livez") as r:  # probes stay open for the kubelet
            assert r.status == 200
        assert not cp.plane.drains.pending
