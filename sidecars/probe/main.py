"""`slurm-sidecars probe livez|readyz --url URL`: an exec probe over a daemon's HTTP endpoints.

Exit 0 when healthy, 1 when not (or unreachable); prints the failing checks so `kubectl describe`
shows why.

`probe controller --url http://127.0.0.1:6817` asks a slurmctld itself (Slurm 25.11 or later, on
its own port) and passes for a controller in control and for a healthy standby alike: a backup
answers `/livez` but never `/readyz` (measured on 26.05: 204 and 500), and a standby that failed
its pod's readiness would stay NotReady and wedge the StatefulSet's rolls. Only this pod's
controller is asked, never its peers (`scontrol ping` would wait for each of them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
from urllib.parse import urlsplit

import aiohttp

from sidecars.runtime.http import CA_FILE
from sidecars.runtime.settings import URL, Flag, add_flags, convert, seconds
from sidecars.slurm import health

URL_FLAG = Flag(
    name="--url", help="base URL of the daemon, e.g. http://127.0.0.1:9100", conv=URL, required=True
)
TIMEOUT_FLAG = Flag(name="--timeout-seconds", help="give up after this long", conv=seconds(), default=3.0)
CA_FLAG = Flag(
    name="--ca-file",
    help="for an https daemon: the CA its certificate chains to (the name is not checked: the "
    "probe asks 127.0.0.1)",
    conv=CA_FILE,
)


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("which", choices=["livez", "readyz", "controller"])
    add_flags(p, URL_FLAG, TIMEOUT_FLAG, CA_FLAG)


async def check(url: str, which: str, timeout: float, tls: ssl.SSLContext | None = None) -> tuple[bool, str]:
    target = url.rstrip("/") + "/" + which
    try:
        async with (
            aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=timeout), connector=aiohttp.TCPConnector(ssl=tls or True)
            ) as s,
            s.get(target) as r,
        ):
            text = await r.text()
            ok = r.status == 200
    except (aiohttp.ClientError, TimeoutError) as exc:
        return False, f"{target}: unreachable: {exc or type(exc).__name__}"
    try:
        body = json.loads(text)
        failing = {k: v.get("detail", "") for k, v in body.get("checks", {}).items() if not v.get("ok")}
    except (ValueError, AttributeError):
        failing = {}
    if ok:
        return True, f"{which}: ok"
    detail = "; ".join(f"{k}: {v}" for k, v in failing.items()) or text.strip()[:300]
    return False, f"{which}: HTTP {r.status}: {detail}"


async def check_controller(url: str, timeout: float) -> tuple[bool, str]:
    """A slurmctld's own word: live (`/livez` 2xx), and in control (`/readyz` 2xx) or a standby."""
    target = urlsplit(url)
    host, port = target.hostname or "", target.port or 80
    async with aiohttp.ClientSession() as s:
        live = await health.probe(s, host, port, "/livez", timeout)
        if not live.ok:
            return False, f"controller: not live: {live.detail} (slurmctld serves /livez from Slurm 25.11)"
        ready = await health.probe(s, host, port, "/readyz", timeout)
    if ready.ok:
        return True, "controller: live, in control"
    return True, f"controller: live, standby (/readyz: {ready.detail})"


def main(args: argparse.Namespace) -> int:
    url, timeout, tls = convert(URL_FLAG, args), convert(TIMEOUT_FLAG, args), convert(CA_FLAG, args)
    if tls is not None:
        tls.check_hostname = False  # the chain is checked; the probe's 127.0.0.1 is no name in it
    if args.which == "controller":
        ok, message = asyncio.run(check_controller(url, timeout))
    else:
        ok, message = asyncio.run(check(url, args.which, timeout, tls))
    print(message, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1
