"""Debian's headless Chromium driven over the Chrome DevTools Protocol with aiohttp's websocket client.

No Selenium and no chromedriver: the protocol's few commands we need (navigate, evaluate, screenshot)
are a JSON message each, aiohttp is already ours, and one process fewer can hang. Chromium picks a
free debugging port itself (`--remote-debugging-port=0`) and writes it to DevToolsActivePort in its
fresh profile directory; it runs in its own process group, which is killed whole at the end.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from sidecars.runtime.waits import within

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",  # a container's /dev/shm is small
    "--window-size=1400,1000",
)


class BrowserError(AssertionError):
    pass


def chromium_path() -> str | None:
    return shutil.which("chromium")


class Page:
    """One page target: `evaluate` runs JavaScript in it, `wait_for` polls an expression until truthy."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.errors: list[str] = []  # uncaught exceptions and console errors on the page
        self.requests: list[str] = []  # every URL the page asked for (after Network.enable)
        self.responses: list[tuple[str, int]] = []
        self._reader = asyncio.create_task(self._read(), name="cdp-reader")

    async def _read(self) -> None:
        async for msg in self._ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            if "id" in data:
                fut = self._waiting.pop(data["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(data)
            elif data.get("method") == "Runtime.exceptionThrown":
                details = data["params"]["exceptionDetails"]
                self.errors.append(str(details.get("exception", {}).get("description") or details))
            elif data.get("method") == "Runtime.consoleAPICalled" and data["params"]["type"] == "error":
                self.errors.append(" ".join(str(a.get("value", a)) for a in data["params"]["args"]))
            elif data.get("method") == "Network.requestWillBeSent":
                self.requests.append(data["params"]["request"]["url"])
            elif data.get("method") == "Network.responseReceived":
                self.responses.append(
                    (data["params"]["response"]["url"], data["params"]["response"]["status"])
                )
            elif data.get("method") == "Log.entryAdded" and data["params"]["entry"]["level"] == "error":
                entry = data["params"]["entry"]
                if entry.get("source") != "network":  # HTTP statuses are checked from `responses`
                    self.errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(BrowserError("the browser closed the connection"))

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._ids += 1
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[self._ids] = fut
        await self._ws.send_str(json.dumps({"id": self._ids, "method": method, "params": params}))
        answer = await within(fut, 30)
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error']}")
        return dict(answer.get("result", {}))

    async def evaluate(self, expression: str) -> Any:
        result = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def navigate(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete'", timeout=30, what=f"{url} to load")

    async def wait_for(self, expression: str, *, timeout: float = 60, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                body = await self.evaluate("document.body ? document.body.innerText.slice(0, 3000) : ''")
                raise BrowserError(
                    f"timed out after {timeout:g}s waiting for {what or expression}; page:\n{body}"
                )
            await asyncio.sleep(0.2)

    async def screenshot(self, path: Path) -> Path:
        """The whole page, not only the window, as a PNG."""
        metrics = await self.send("Page.getLayoutMetrics")
        size = metrics["cssContentSize"]
        shot = await self.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    async def close(self) -> None:
        await self._ws.close()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)


@contextlib.asynccontextmanager
async def chromium(profile: Path) -> AsyncIterator[Page]:
    """A headless Chromium on a fresh profile, and its first page; everything is gone afterwards."""
    exe = chromium_path()
    if exe is None:
        raise BrowserError("chromium is not installed (scripts/setup.sh installs Debian's package)")
    profile.mkdir(parents=True, exist_ok=False)
    log = (profile.parent / "chromium.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        exe,
        *FLAGS,
        f"--user-data-dir={profile}",
        "--remote-debugging-port=0",
        "about:blank",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,  # its own process group: zygotes and renderers die with it
    )
    log.close()
    session: aiohttp.ClientSession | None = None
    page: Page | None = None
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (active.exists() and len(active.read_text().split()) >= 2):
            if proc.returncode is not None:
                raise BrowserError(
                    f"chromium exited with {proc.returncode}: see {profile.parent}/chromium.log"
                )
            if time.monotonic() > deadline:
                raise BrowserError("chromium wrote no DevToolsActivePort within 60 s")
            await asyncio.sleep(0.1)
        port = int(active.read_text().split()[0])
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        async with session.get(f"http://127.0.0.1:{port}/json/list") as r:
            targets = await r.json()
        target = next(t for t in targets if t["type"] == "page")
        ws = await session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024)
        page = Page(ws)
        await page.send("Runtime.enable")
        await page.send("Log.enable")
        await page.send("Page.enable")
        yield page
    finally:
        if page is not None:
            await page.close()
        if session is not None:
            await session.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await within(proc.wait(), 10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of the group outlived the browser
        await proc.wait()
        for _ in range(100):  # the group's last members may need a moment to be reaped
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            await asyncio.sleep(0.05)
