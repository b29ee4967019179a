"""The page at 1,000 nodes in headless Chromium: every tile drawn from one answer, a change redrawn
in place by the next long poll, never a request per node. (The fleet is fed with Slurm's model
objects; the real cluster's page is tested in test_browser.py.)"""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.web.cdp import chromium
from tests.web.fleet import VIEWER, job, node, served

# no skip when Chromium is missing: scripts/setup.sh installs it, and its absence fails loudly


@pytest.mark.timeout(180)
async def test_a_thousand_nodes_on_the_page(tmp_path: Path) -> None:
    now = int(time.time())
    names = [f"gpu{i:04d}" for i in range(1000)]
    nodes = [node(n, "ALLOCATED" if i % 4 else "IDLE") for i, n in enumerate(names)]
    jobs = [job(i, n, now - i) for i, n in enumerate(names) if i % 4]
    shots = Path(os.environ.get("SIDECARS_ARTIFACTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    async with served() as s, chromium(tmp_path / "profile") as page:
        s.publish(nodes, jobs)
        await page.send("Network.enable")
        await page.navigate(s.url + "/ui/")
        await page.wait_for("!document.getElementById('login').hidden", what="the login form")
        await page.evaluate(
            f"document.getElementById('token').value = '{VIEWER}';"
            "document.getElementById('login-form').requestSubmit()"
        )
        await page.wait_for("document.querySelectorAll('#grid .node').length === 1000", what="1,000 tiles")
        assert await page.evaluate("document.querySelectorAll('#grid .node.c-busy').length") == 750
        # the scale-in order: the first to go shown, all 1,000 a click away
        visible = "[...document.querySelectorAll('#scale-in-order li')].filter(e => !e.hidden).length"
        assert await page.evaluate("document.querySelectorAll('#scale-in-order li').length") == 1000
        assert await page.evaluate(visible) == 48
        await page.evaluate("document.getElementById('scale-in-more').open = true")
        await page.wait_for(f"{visible} === 1000", what="the whole scale-in order")
        first = await page.evaluate("document.querySelector('#grid .node[data-name=gpu0001]') !== null")
        assert first
        await page.evaluate("window.tile = document.querySelector('#grid .node[data-name=gpu0001]')")
        # one node drains: the next answer redraws that tile, in place
        nodes[1] = node("gpu0001", "ALLOCATED+DRAIN", "slurm-sidecars: pod slurm/gpu0001 terminating")
        s.drains.written({"gpu0001"})
        s.publish(nodes, jobs)
        await page.wait_for(
            "document.querySelector('#grid .node[data-name=gpu0001]').dataset.class === 'draining'",
            what="the draining tile",
        )
        assert await page.evaluate("window.tile === document.querySelector('#grid .node[data-name=gpu0001]')")
        await page.wait_for("document.querySelector('#drain-rows tr[data-node=gpu0001]') !== null")
        # the sections later features fill: "not available" until a provider feeds the same document
        assert await page.evaluate("document.getElementById('maintenance-body').textContent") == (
            "not available from this control plane"
        )
        window = {"nodes": "gpu[0000-0099]", "start": "2026-12-02T06:00:00Z", "reason": "BIOS update"}
        s.page.sections["maintenance"] = lambda: [window]
        s.page.sections["upgrade"] = lambda: []
        s.page.touch()
        await page.wait_for(
            "document.querySelector('#maintenance-body td') && "
            "document.querySelector('#maintenance-body tbody').textContent.includes('BIOS update')",
            what="the maintenance window",
        )
        assert await page.evaluate("document.getElementById('upgrade-body').textContent") == "none"
        await page.screenshot(shots / "web-page-1000-nodes.png")
        print(f"\nscreenshot of the page at 1,000 nodes: {shots / 'web-page-1000-nodes.png'}")
    paths = [urlsplit(u).path for u in page.requests]
    states = [p for p in paths if p == "/ui/api/state"]
    assert set(paths) <= {"/ui/", "/ui/static/app.js", "/ui/static/app.css", "/ui/static/favicon.svg"} | {
        "/ui/api/state",
        "/ui/login",
    }, paths
    # refused before login, the first answer, one per change (two), and one per 5 s wait (served's cap)
    # that passed without a change: never a poll loop, never a request per node
    assert 3 <= len(states) <= 4 + (time.monotonic() - started) / 5 + 1, paths
    assert not page.errors, page.errors
