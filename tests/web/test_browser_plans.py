"""The page's recent plans in a real browser (Debian's headless Chromium).

Against the demo's real stack (real Slurm, config-sync serving plans): plans made with the real
`slurm-sidecars plan` show with their verdict and Slurm's words; markup in those words is text,
never HTML; a secret value of a planned set shows nowhere; the page's viewer credential cannot
start a plan. Against a config-sync stand-in (no Slurm): what the page says when config-sync is
unreachable, slow, answers junk, or serves no plans, and a plan of many jobs stays short.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from sidecars.cli import self_argv
from sidecars.controlplane.http.config_feed import ConfigFeed
from sidecars.demo.stack import DemoStack
from sidecars.devcluster import Release
from sidecars.runtime import http, process, waits
from tests.web.cdp import Page, chromium
from tests.web.fleet import VIEWER, node, served

HOSTILE = "<img src=x onerror=\"document.title='owned'\">"
SECRET = "hunter2-plan-secret-value"


async def _log_in(page: Page, token: str) -> None:
    await page.wait_for("!document.getElementById('login').hidden", what="the login form")
    await page.evaluate(
        f"document.getElementById('token').value = {json.dumps(token)};"
        "document.getElementById('login-form').requestSubmit()"
    )
    await page.wait_for("document.getElementById('live').textContent === 'live'", what="the page to go live")


async def _plan(stack: DemoStack, where: Path, files: dict[str, bytes]) -> dict[str, Any]:
    where.mkdir()
    for name, data in files.items():
        (where / name).write_bytes(data)
    argv = self_argv(
        "plan",
        "-f",
        str(where),
        "--config-sync",
        stack.config_sync_url,
        "--token-file",
        str(stack.token_file),
    )
    done = await process.run([*argv, "--output", "json"], timeout=90, env=stack.cluster.env)
    answer = json.loads(done.stdout)
    assert isinstance(answer, dict) and answer["exit_code"] == done.returncode, (done.returncode, done.text())
    return answer


PLANS = "[...document.querySelectorAll('#plans li[data-verdict]')]"


@pytest.mark.timeout(300)
@pytest.mark.releases("slurm26")  # the page reads our API, the same on every release
async def test_real_plans_show_as_text_without_secrets(release: Release, tmp_path: Path) -> None:
    async with DemoStack(release, 3) as stack, chromium(tmp_path / "profile") as page:
        await page.send("Network.enable")
        await page.navigate(stack.page_url)
        await _log_in(page, stack.viewer_token)
        await page.wait_for(
            "document.getElementById('plans').textContent.includes('no plan since config-sync started')",
            what="an empty list of plans",
        )
        live = stack.volume.files()
        conf = live["slurm.conf"]
        same = await _plan(stack, tmp_path / "same", live)
        bad = conf + f"AccountingStoragePass={SECRET}\nPartitionName=p1 Nodes={HOSTILE}\n".encode()
        refused = await _plan(stack, tmp_path / "bad", {**live, "slurm.conf": bad})
        assert (same["verdict"], refused["verdict"]) == ("no-change", "refused"), refused
        assert "<img" in refused["reason"], refused["reason"]  # Slurm's (or our checks') words carry it

        await page.wait_for(f"{PLANS}.length === 2", what="both plans on the page")
        shown = await page.evaluate(f"{PLANS}.map(li => [li.dataset.verdict, li.dataset.sha])")
        assert shown == [["refused", refused["sha256"]], ["no-change", same["sha256"]]]  # newest first
        reason = await page.evaluate(
            "document.querySelector('#plans li[data-verdict=refused] .reason').textContent"
        )
        assert reason == refused["reason"], reason
        # the markup is text: no element made of it, no handler run
        assert await page.evaluate("document.querySelectorAll('#plans img, #plans [onerror]').length") == 0
        assert await page.evaluate("document.title") == "slurm-sidecars"
        # the planned set's secret value: not on the page, not in what the page was sent
        assert SECRET not in await page.evaluate("document.body.innerHTML")
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s,
            s.get(
                stack.control_plane_url + "/ui/api/state",
                headers={"Authorization": f"Bearer {stack.viewer_token}"},
            ) as r,
        ):
            document = await r.text()
            assert r.status == 200 and SECRET not in document and refused["sha256"] in document
            # the viewer's credential starts no plan: config-sync wants the operator's
            async with s.post(
                stack.config_sync_url + "/v1/plan",
                json={"files": []},
                headers={"Authorization": f"Bearer {stack.viewer_token}"},
            ) as refusal:
                assert refusal.status == 401, await refusal.text()
        assert not page.errors, page.errors
    # the page asked for nothing that plans (only its own files, its state, its login)
    assert not [u for u in page.requests if "plan" in u], page.requests


# ---------------------------------------------------------------------------- a config-sync stand-in
STATUS = {"applied": {"generation": 1, "sha256": "ab" * 32, "at": "2026-01-01T00:00:00Z"}, "pending": False}


def _a_plan(**over: Any) -> dict[str, Any]:
    return {
        "at": "2026-01-01T00:00:01Z",
        "verdict": "held-for-jobs",
        "sha256": "cd" * 32,
        "live_sha256": "ab" * 32,
        "reason": "it would end jobs",
        "restart": [],
        "dry_run_seconds": 1.5,
        "files": [{"name": "slurm.conf", "change": "modified"}],
        "jobs": list(range(1, 51)),
        "jobs_total": 10_000,
        **over,
    }


@contextlib.asynccontextmanager
async def stand_in(answers: dict[str, Any]) -> AsyncIterator[str]:
    """config-sync's read-only routes, answering what `answers` holds now (bytes as they are;
    a float: that many seconds late; missing: 404). A late answer still pending when the block ends is
    given at once: the server's close would otherwise cancel its handler and not wait for it."""
    closing = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        answer = answers.get(request.path)
        if answer is None:
            raise web.HTTPNotFound()
        if isinstance(answer, float):
            await waits.until_set(closing, answer)
            answer = {}
        body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    async with http.serve(app, "127.0.0.1", 0) as port:
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            closing.set()


async def _note(page: Page, expected: str) -> str:
    return str(
        await page.wait_for(
            f"(t => t.includes({json.dumps(expected)}) && t)"
            "(document.getElementById('plans-note').textContent)",
            timeout=20,
            what=f"the plans note to say {expected!r}",
        )
    )


@pytest.mark.timeout(120)
async def test_what_the_page_says_of_an_absent_slow_or_junk_config_sync(tmp_path: Path) -> None:
    answers: dict[str, Any] = {
        "/status": STATUS,
        "/history": {"generations": [], "limit": 10},
        "/v1/plans": {
            "served": True,
            "limit": 20,
            "plans": [_a_plan(reason=HOSTILE, verdict='refused" onclick=x')],
        },
    }
    async with stand_in(answers) as url:
        feed = ConfigFeed(url, token=VIEWER, interval=0.2)
        async with served(config=feed) as s, chromium(tmp_path / "profile") as page:
            feed.on_change = s.page.touch
            reader = asyncio.create_task(feed.run(), name="config-feed")
            try:
                s.publish([node("n1")], [])
                await page.navigate(s.url + "/ui/")
                await _log_in(page, VIEWER)
                # a verdict that is not one is refused whole: nothing of that answer is shown
                await _note(page, "/v1/plans: plans[0].verdict: not a verdict")
                assert await page.evaluate(f"{PLANS}.length") == 0
                # a good answer: a plan of 10,000 jobs names 50 and counts the rest
                answers["/v1/plans"] = {"served": True, "limit": 20, "plans": [_a_plan(reason=HOSTILE)]}
                await page.wait_for(f"{PLANS}.length === 1", what="the plan")
                jobs = await page.evaluate("document.querySelector('#plans li .jobs').textContent")
                assert jobs.endswith(": " + ", ".join(map(str, range(1, 51))) + " (+9950 more)"), jobs
                assert (
                    await page.evaluate("document.querySelector('#plans li .reason').textContent") == HOSTILE
                )
                assert await page.evaluate("document.querySelectorAll('#plans img').length") == 0
                # junk: not JSON, then the wrong shape; what was read before stays, and the page says so
                answers["/v1/plans"] = b"<html>proxy error</html>"
                said = await _note(page, "/v1/plans: not JSON")
                assert "showing the last read" in said and await page.evaluate(f"{PLANS}.length") == 1
                answers["/v1/plans"] = {"plans": "all of them"}
                await _note(page, "no 'served' flag or 'plans' list")
                # an older config-sync, with no /v1/plans: its generations still show
                del answers["/v1/plans"]
                await _note(page, "/v1/plans: HTTP 404")
                assert "live: generation 1" in await page.evaluate(
                    "document.getElementById('config-current').textContent"
                )
                # plans not served (no operator token on config-sync): said, with the flag to give
                answers["/v1/plans"] = {"served": False, "limit": 0, "plans": []}
                await _note(page, "runs without --operator-token-file")
                assert await page.evaluate(f"{PLANS}.length") == 0
                # slow: config-sync answers after the feed's time limit (5 s); the plans as last read
                answers["/v1/plans"] = {"served": True, "limit": 20, "plans": [_a_plan()]}
                await page.wait_for(f"{PLANS}.length === 1", what="the plan again")
                answers["/status"] = 7.0
                await page.wait_for(
                    "document.getElementById('config-current').textContent.includes('TimeoutError')",
                    timeout=30,
                    what="the slow config-sync said",
                )
                await _note(page, "config-sync did not answer: the plans as last read")
                assert await page.evaluate(f"{PLANS}.length") == 1
                assert not page.errors, page.errors
            finally:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
