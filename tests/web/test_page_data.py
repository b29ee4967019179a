"""The page's one document: every node in the class its Slurm state means, drains with their
progress, the long poll that refreshes it, and 1,000 nodes in one answer."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from sidecars.controlplane.http.config_feed import ConfigFeed
from sidecars.devcluster import free_port
from sidecars.runtime.waits import within
from tests.web.fleet import VIEWER, job, node, served, session

AUTH = {"Authorization": f"Bearer {VIEWER}"}


async def _state(http: aiohttp.ClientSession, url: str, **params: str) -> dict:
    async with http.get(url + "/ui/api/state", params=params, headers=AUTH) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def test_every_state_has_its_class() -> None:
    now = int(time.time())
    nodes = [
        node("n1", "IDLE"),
        node("n2", "ALLOCATED"),
        node("n3", "MIXED+DRAIN", "slurm-sidecars: pod slurm/n3 terminating"),
        node("n4", "IDLE+DRAIN", "slurm-sidecars: pod slurm/n4 terminating"),
        node("n5", "DOWN", "Not responding"),
        node("n6", "IDLE+NOT_RESPONDING"),
        node("n7", "FUTURE"),
        node("n10", "IDLE+COMPLETING"),
        node("n11", "ALLOCATED+DRAIN", "admin: bad DIMM"),
    ]
    jobs = [job(1, "n2", now - 60), job(2, "n3", now - 60, limit=10), job(3, "n11", now, limit=None)]
    async with served() as s, session() as http:
        s.drains.written({"n3"})
        s.publish(nodes, jobs)
        doc = await _state(http, s.url)
    classes = {n["name"]: n["class"] for n in doc["nodes"]}
    assert classes == {
        "n1": "idle",
        "n2": "busy",
        "n3": "draining",
        "n4": "drained",
        "n5": "down",
        "n6": "unregistered",
        "n7": "unregistered",
        "n10": "busy",
        "n11": "draining",
    }
    assert [n["name"] for n in doc["nodes"]][-2:] == ["n10", "n11"]  # natural order
    assert doc["counts"] == {
        "idle": 1,
        "busy": 2,
        "draining": 2,
        "drained": 1,
        "down": 1,
        "unregistered": 2,
        "other": 0,
    }
    drains = {d["node"]: d for d in doc["drains"]}
    assert set(drains) == {"n3", "n11"}
    # ours: from our write to the end of the job that holds it (start + time limit)
    assert drains["n3"]["ours"] and drains["n3"]["jobs"] == [2]
    assert drains["n3"]["deadline"] == now - 60 + 600
    assert drains["n3"]["started_at"] <= time.time()
    # someone else's, held by a job with no time limit: no deadline, and said so
    assert not drains["n11"]["ours"] and drains["n11"]["deadline"] is None and drains["n11"]["unlimited"]
    assert doc["scale_in"][0] in {"n1", "n4"}  # idle first
    assert doc["maintenance"] is None and doc["upgrade"] is None  # not provided by this control plane
    assert doc["config"]["source"] is None and "--config-sync" in doc["config"]["error"]


async def test_a_drain_that_ends_is_listed_as_done() -> None:
    now = int(time.time())
    async with served() as s, session() as http:
        s.publish([node("n1", "MIXED+DRAIN", "slurm-sidecars: x")], [job(1, "n1", now)])
        first = await _state(http, s.url)
        assert [d["node"] for d in first["drains"]] == ["n1"] and first["drains_done"] == []
        s.publish([node("n1", "IDLE+DRAIN", "slurm-sidecars: x")], [])
        doc = await _state(http, s.url)
    assert doc["drains"] == [] and [d["node"] for d in doc["drains_done"]] == ["n1"]
    assert doc["drains_done"][0]["done_at"] >= doc["drains_done"][0]["started_at"]
    assert doc["version"] != first["version"]


async def test_the_long_poll_wakes_on_a_change_and_otherwise_answers_after_wait() -> None:
    async with served() as s, session() as http:
        s.publish([node("n1")], [])
        doc = await _state(http, s.url)
        started = time.monotonic()
        same = await _state(http, s.url, since=doc["version"], wait="0.5")
        assert same["version"] == doc["version"] and time.monotonic() - started >= 0.45
        # a fleet change wakes the waiting poll
        poll = asyncio.create_task(_state(http, s.url, since=doc["version"], wait="20"))
        await asyncio.sleep(0.2)
        assert not poll.done()
        s.publish([node("n1", "ALLOCATED")], [job(1, "n1", int(time.time()))])
        woke = await within(poll, 5)
        assert woke["nodes"][0]["class"] == "busy"
        # so does a change outside the fleet (config-sync's answer, a drain, a later section)
        poll = asyncio.create_task(_state(http, s.url, since=woke["version"], wait="20"))
        await asyncio.sleep(0.2)
        s.page.touch()
        assert (await within(poll, 5))["version"] != woke["version"]
        # a bad wait is refused, a long one capped (max_wait=5 here)
        async with http.get(s.url + "/ui/api/state", params={"wait": "nan"}, headers=AUTH) as r:
            assert r.status == 400


async def test_a_thousand_nodes_in_one_compressed_answer() -> None:
    now = int(time.time())
    nodes = [node(f"gpu{i:04d}", "ALLOCATED" if i % 3 else "IDLE") for i in range(1000)]
    jobs = [job(i, f"gpu{i:04d}", now - i, limit=60 + i % 600) for i in range(1000) if i % 3]
    async with served() as s, session() as http:
        s.publish(nodes, jobs)
        async with http.get(s.url + "/ui/api/state", headers={**AUTH, "Accept-Encoding": "gzip"}) as r:
            assert r.headers.get("Content-Encoding") == "gzip"
            doc = await r.json()
    assert len(doc["nodes"]) == 1000 and len(doc["scale_in"]) == 1000
    assert doc["counts"]["busy"] == 666 and doc["counts"]["idle"] == 334
    busy = next(n for n in doc["nodes"] if n["name"] == "gpu0001")
    assert busy["jobs"] == [1] and busy["busy_until"] == now - 1 + 60 * 61


async def test_config_sync_unreachable_is_said_and_keeps_what_was_read() -> None:
    feed = ConfigFeed(f"http://127.0.0.1:{free_port()}")
    feed.status, feed.history = {"applied": {"generation": 3}}, [{"outcome": "applied"}]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as http:
        await feed.read_once(http)
    view = feed.as_json()
    assert not view["reachable"] and "config-sync at http://127.0.0.1:" in view["error"]
    assert view["status"] == {"applied": {"generation": 3}} and view["history"] == [{"outcome": "applied"}]
    assert feed.version == 1
