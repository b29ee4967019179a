"""The operator's page in a real browser (Debian's headless Chromium) against the demo's real stack:
real Slurm, config-sync on a kubelet-style volume, the control plane, a worker agent per node.

It logs in with the viewer token through the page's own form, then checks what a person would look
at: the grid holds exactly the nodes Slurm has, a drain started by the preStop hook appears with
the job holding the node and completes, an admin's drain is listed among those nobody owns, a valid
change shows as applied with its diff, a broken one as rejected in Slurm's words. Along the way the
page must fetch nothing but its own files and its one state request, keep the session cookie out of
reach of scripts, and throw no error. Screenshots
go to $SIDECARS_ARTIFACTS (or the test's tmp_path), printed at the start.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from sidecars.cli import self_argv
from sidecars.demo.stack import DemoStack
from sidecars.devcluster import Release
from sidecars.runtime.waits import within
from tests.web.cdp import Page, chromium

# no skip when Chromium is missing: scripts/setup.sh installs it, and its absence fails loudly


def _artifacts(tmp_path: Path, release: Release) -> Path:
    root = Path(os.environ.get("SIDECARS_ARTIFACTS") or tmp_path)
    out = root / f"web-page-{release.name}"
    out.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots of the page: {out}")
    return out


def _js(value: object) -> str:
    """`value` as the JSON text JSON.stringify makes of it, quoted as a JavaScript string."""
    return json.dumps(json.dumps(value, separators=(",", ":")))


def _q(selector: str) -> str:
    return f"document.querySelector({json.dumps(selector)})"


async def _text(page: Page, selector: str) -> str:
    return str(await page.evaluate(f"({_q(selector)} || {{}}).textContent || ''"))


async def _log_in(page: Page, token: str) -> None:
    await page.wait_for("!document.getElementById('login').hidden", what="the login form")
    await page.evaluate(
        f"document.getElementById('token').value = {json.dumps('not-' + token)};"
        "document.getElementById('login-form').requestSubmit()"
    )
    await page.wait_for(
        "document.getElementById('login-error').textContent === 'wrong token'", what="a wrong token refused"
    )
    await page.evaluate(
        f"document.getElementById('token').value = {json.dumps(token)};"
        "document.getElementById('login-form').requestSubmit()"
    )
    await page.wait_for("document.getElementById('live').textContent === 'live'", what="the page to go live")


@pytest.mark.timeout(300)
@pytest.mark.releases("slurm26")  # the page reads our API, the same on every release
async def test_the_page_follows_the_real_cluster(release: Release, tmp_path: Path) -> None:
    shots = _artifacts(tmp_path, release)
    async with DemoStack(release, 3) as stack, chromium(tmp_path / "profile") as page:
        await page.send("Network.enable")
        await page.navigate(stack.page_url)
        await _log_in(page, stack.viewer_token)
        # the session cookie is HttpOnly: no script on the page can read it
        assert await page.evaluate("document.cookie") == ""

        # the grid shows exactly the nodes Slurm has, in the classes their states mean
        slurm_nodes = sorted(n.name for n in await stack.cluster.client().nodes())
        grid = "[...document.querySelectorAll('#grid .node')].map(e => e.dataset.name)"
        await page.wait_for(f"JSON.stringify({grid}) === {_js(slurm_nodes)}", what="Slurm's nodes")
        await page.wait_for(f"{_q('#legend li[data-class=idle]')}.dataset.count === '{len(slurm_nodes)}'")

        # a worker scaled in: its preStop drain hook drains it while a job still runs on it
        c = stack.cluster
        go = c.out_dir / "go"
        # runs until the test says so: still running while the page shows the drain, however slow
        job = await c.sbatch("-w", "n3", "-t", "2", wrap=f"while [ ! -e {go} ]; do sleep 0.2; done")
        await c.wait_job(job, "RUNNING", timeout=30)
        await page.wait_for(f"{_q('#grid .node[data-name=n3]')}.dataset.class === 'busy'", what="n3 busy")
        hook = await asyncio.create_subprocess_exec(
            *self_argv("drain-hook", "--socket", str(stack.sockets["n3"]), "--timeout-seconds", "90"),
            env=c.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            await page.wait_for(
                f"{_q('#grid .node[data-name=n3]')}.dataset.class === 'draining'", what="n3 draining"
            )
            row = await page.wait_for(f"({_q('#drain-rows tr[data-node=n3]')} || {{}}).textContent")
            assert f"job {job}" in row and "slurm-sidecars:" in row and "%" in row, row
            assert await page.evaluate(f"{_q('#drain-rows tr[data-node=n3] .bar > span')}.style.width")
            await page.screenshot(shots / "1-draining.png")
            go.touch()
            out, _ = await within(hook.communicate(), 90)
        finally:
            if hook.returncode is None:
                hook.kill()
                await hook.wait()
        assert hook.returncode == 0, out.decode()[-2000:]
        await page.wait_for(
            f"{_q('#grid .node[data-name=n3]')}.dataset.class === 'drained'", what="n3 drained"
        )
        await page.wait_for(
            "!document.querySelector('#drain-rows tr[data-node=n3]')", what="the drain row gone"
        )
        done = await page.wait_for(f"({_q('#drains-done li[data-node=n3]')} || {{}}).textContent")
        assert "drained in" in done, done

        # an admin's drain, not through our API: listed among the drains nobody owns; ours (n3) is not
        await c.client().drain(["n2"], "bad fan, ticket 12")
        unowned = await page.wait_for(
            f"({_q('#unowned-rows tr[data-node=n2]')} || {{}}).textContent", what="n2 listed as unowned"
        )
        assert "unknown" in unowned and "bad fan, ticket 12" in unowned, unowned
        assert await page.evaluate(f"{_q('#unowned-rows tr[data-node=n3]')} === null")
        assert await page.evaluate("document.getElementById('unowned-none').hidden")

        # a valid change: applied, with the diff of what changed
        conf = stack.volume.files()["slurm.conf"].decode()
        stack.volume.update({"slurm.conf": re.sub(r"MaxTime=\S+", "MaxTime=120", conf)})
        applied = await page.wait_for(
            f"({_q('#config-history li[data-outcome=applied]')} || {{}}).textContent",
            what="the applied change",
        )
        assert "generation 2" in applied or "generation 1" in applied, applied
        diff = await _text(page, "#config-history li[data-outcome=applied] pre.diff")
        assert "+" in diff and "MaxTime=120" in diff and "-" in diff, diff

        # a broken change: rejected, in Slurm's own words, and the line it added shown
        good = stack.volume.files()["slurm.conf"].decode()
        stack.volume.update({"slurm.conf": good + "ThisIsNotAKey=1\n"})
        reason = await page.wait_for(
            f"({_q('#config-history li[data-outcome=rejected] .reason')} || {{}}).textContent",
            what="the rejection",
        )
        status = await stack.get(stack.config_sync_url + "/status")
        assert isinstance(status, dict) and status["rejected"], status
        assert reason == status["rejected"]["reason"] and "ThisIsNotAKey" in reason, (reason, status)
        rejected_diff = await _text(page, "#config-history li[data-outcome=rejected] pre.diff")
        assert "+ThisIsNotAKey=<redacted>" in rejected_diff, rejected_diff  # a *Key* option's value
        await page.evaluate(
            "document.querySelectorAll('#config-history details').forEach(d => d.open = true)"
        )
        await page.wait_for("document.getElementById('live').textContent === 'live'")
        await page.screenshot(shots / "2-config-history.png")

        # the scale-in order is shown, and the sections later features fill are there
        order = await stack.get(stack.control_plane_url + "/v1/scale-in-order", auth=True)
        shown = "[...document.querySelectorAll('#scale-in-order li')].map(e => e.textContent)"
        await page.wait_for(f"JSON.stringify({shown}) === {_js(order)}", what="the scale-in order")
        assert await _text(page, "#maintenance-body") and await _text(page, "#upgrade-body")

    # only our own origin, and after the page's files only its one state request (never per node)
    origin = urlsplit(stack.page_url)
    requests = page.requests
    paths = [urlsplit(u).path for u in requests]
    assert all(urlsplit(u).netloc == origin.netloc for u in requests), requests
    # 401 only where expected: the first state request before logging in, and the wrong token
    refused = [(urlsplit(u).path, st) for u, st in page.responses if st >= 400]
    assert set(refused) <= {("/ui/api/state", 401), ("/ui/login", 401)}, refused
    assert {"/ui/", "/ui/static/app.js", "/ui/static/app.css", "/ui/api/state", "/ui/login"} <= set(paths)
    assert set(paths) <= {"/ui/", "/ui/static/app.js", "/ui/static/app.css", "/ui/static/favicon.svg"} | {
        "/ui/api/state",
        "/ui/login",
    }, paths
    assert not page.errors, page.errors
