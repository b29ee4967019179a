"""`slurm-sidecars probe livez|readyz --url URL`: an exec probe over a daemon's HTTP endpoints.

Exit 0 when healthy, 1 when not (or unreachable); prints the failing checks so `kubectl describe`
shows why.

Healthy is any 2xx: our daemons answer 200, Slurm's own endpoints (25.11 and later) 204.

`probe restd-livez|restd-readyz --url http://127.0.0.1:6820 --token-file F`: slurmrestd, on every release
(`probe/restd.py`).

`probe controller --url http://127.0.0.1:6817 [--controller NAME]` asks this pod's slurmctld
itself and passes for a controller in control and for a healthy standby alike: a standby that
failed its pod's readiness would stay NotReady and wedge the StatefulSet's rolls. Where the
release serves `/livez` (25.11 and later, without `disable_http`) slurmctld's own word is taken at
`--url`: a backup answers `/livez` but never `/readyz` (measured on 26.05: 204 and 500). Where it
does not, Slurm's commands ask the controller `--controller` names alone, through a configuration
naming only it (`slurm.standby`): a standby answers a ping and refuses requests as a standby. Only
this pod's controller is asked, never its peers (a plain `scontrol ping` would wait for each).

26.05 answers `/readyz?verbose` (Slurm's own words: `primary:T|F`, reconfiguring, workers) only to
root's or SlurmUser's JWT: given `--slurm-token-file` or `--jwt-key-file`, the probe asks it and
quotes the words; without one, or when Slurm refuses it, the plain `/readyz` decides and the
message says why (`httpauth`, `health.readiness`).

`probe metrics --url http://127.0.0.1:6817 [--path /metrics/jobs]` reads slurmctld's metrics once
(`scrape`): exit 0 when read, or when this controller is a standby (its 303 to the primary,
followed only to a `SlurmctldHost` of our slurm.conf), 1 when refused (401/403, said as
unauthorized) or failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import ssl
import sys
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

import aiohttp

from sidecars.probe import restd
from sidecars.runtime import answers, tlsroots
from sidecars.runtime.http import CA_FILE
from sidecars.runtime.settings import (
    URL,
    Conv,
    add_flags,
    declared,
    read_token,
    seconds,
    setting,
    settings_from,
    settings_of,
)
from sidecars.slurm import SlurmClient, SlurmError, health, scrape, standby
from sidecars.slurm.httpauth import Credential

TIMEOUT_SECONDS = 3.0  # a kubelet's exec probe gives its command about its own timeoutSeconds
# the file's name only: the token is read when a restd-* probe asks (a livez probe in a container
# whose environment names another role's token file must not depend on that file)
TOKEN_PATH = Conv(lambda text, what: text, lambda _: "", "FILE")


@declared(kw_only=True)
class ProbeSettings:
    url: str = setting(help="base URL of the daemon, e.g. http://127.0.0.1:9100", conv=URL, required=True)
    timeout_seconds: float = setting(default=TIMEOUT_SECONDS, conv=seconds(), help="give up after this long")
    controller: str | None = setting(
        default=None,
        help="probe controller: this pod's slurmctld, as its SlurmctldHost name (default: this host's "
        "short name, as slurmctld finds its own entry); asked by it where the release serves no /livez",
    )
    ca: ssl.SSLContext | None = setting(
        default=None,
        flag="--ca-file",
        conv=CA_FILE,
        help="for an https daemon: the CA its certificate chains to (the name is not checked: the "
        "probe asks 127.0.0.1)",
    )
    token_file: str | None = setting(
        default=None,
        conv=TOKEN_PATH,
        help="probe restd-*: the JWT slurmrestd's callers present (X-SLURM-USER-TOKEN; not root's)",
    )
    credential: Credential = settings_of(default_factory=Credential)
    path: str = setting(default="/metrics", help="probe metrics: the endpoint read")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("which", choices=["livez", "readyz", "controller", "metrics", *restd.CHECKS])
    add_flags(p, ProbeSettings)


async def check(url: str, which: str, timeout: float, tls: ssl.SSLContext | None = None) -> tuple[bool, str]:
    target = url.rstrip("/") + "/" + which
    try:
        async with (
            aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=timeout),
                connector=aiohttp.TCPConnector(ssl=tlsroots.client_context(target, tls)),
            ) as s,
            s.get(target) as r,
        ):
            text = await answers.text(r)
            ok = 200 <= r.status < 300  # Slurm's own endpoints answer 204
    except (aiohttp.ClientError, TimeoutError) as exc:
        return False, f"{target}: unreachable: {exc or type(exc).__name__}"
    except answers.AnswerTooLarge as exc:
        return False, f"{target}: {exc}"
    try:
        body = json.loads(text)
        failing = {k: v.get("detail", "") for k, v in body.get("checks", {}).items() if not v.get("ok")}
    except (ValueError, AttributeError):
        failing = {}
    if ok:
        return True, f"{which}: ok"
    detail = "; ".join(f"{k}: {v}" for k, v in failing.items()) or text.strip()[:300]
    return False, f"{which}: HTTP {r.status}: {detail}"


async def check_controller(
    url: str,
    timeout: float,
    controller: str | None = None,
    env: Mapping[str, str] | None = None,
    cred: Credential | None = None,
) -> tuple[bool, str]:
    """This pod's slurmctld: live, and in control or a standby; or not live, saying why. Its own
    `/livez` and `/readyz` where its release serves them, else Slurm's commands asking it alone
    (an older slurmctld drops an HTTP request unanswered: measured on 22.05 and 24.11)."""
    deadline = time.monotonic() + timeout
    try:
        version = await SlurmClient(env=env).parse_config(timeout=timeout)
        comm_params = standby.communication_parameters(standby.conf_path(env).read_text())
    except (SlurmError, OSError) as exc:
        return False, f"controller: cannot read Slurm's configuration: {exc}"
    left = max(deadline - time.monotonic(), 0.1)
    if health.served(version, comm_params):
        return await _ask_http(url, left, cred, health.verbose_needs_auth(version))
    name = controller or socket.gethostname().split(".", 1)[0]
    try:
        answer = await standby.ask_alone(name, left, env)
    except (standby.NotAController, OSError) as exc:
        return False, f"controller: cannot ask {name}: {exc}"
    if answer.role == standby.Role.IN_CONTROL:
        return True, "controller: live, in control"
    if answer.role == standby.Role.STANDBY:
        return True, f"controller: live, standby ({name}: {answer.detail})"
    if answer.role == standby.Role.DOWN:
        return False, f"controller: not live: {name}: {answer.detail}"
    return (
        False,
        f"controller: {name} answers pings but neither serves nor says it is a standby: {answer.detail}",
    )


async def _ask_http(url: str, timeout: float, cred: Credential | None, needs_auth: bool) -> tuple[bool, str]:
    target = urlsplit(url)
    host, port = target.hostname or "", target.port or 80
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        live = await health.probe(s, host, port, "/livez", timeout)
        if not live.ok:
            return False, f"controller: not live: {live.detail}"
        left = max(deadline - time.monotonic(), 0.1)
        ready = await health.readiness(s, host, port, cred, needs_auth=needs_auth, timeout=left)
    said = f"; Slurm says: {ready.words}" if ready.words else ""
    said += f"; {ready.degraded}" if ready.degraded else ""
    if ready.answer.ok:
        return True, f"controller: live, in control{said}"
    return True, f"controller: live, standby (/readyz: {ready.answer.detail}{said})"


async def check_metrics(
    url: str, path: str, timeout: float, env: Mapping[str, str] | None = None, cred: Credential | None = None
) -> tuple[bool, str]:
    """One read of slurmctld's `path` at `url`: (read or a standby, the outcome and why)."""
    try:
        controllers = standby.host_addresses(standby.conf_path(env).read_text())
    except OSError as exc:
        return False, f"metrics: cannot read slurm.conf for the controllers' addresses: {exc}"
    async with aiohttp.ClientSession() as s:
        got = await scrape.scrape(
            s, url.rstrip("/") + path, controllers=controllers, credential=cred, timeout=timeout
        )
    lines = sum(1 for ln in got.text.splitlines() if ln and not ln.startswith("#"))
    more = f" ({lines} samples)" if got.outcome is scrape.ScrapeOutcome.OK else ""
    served = got.outcome in (scrape.ScrapeOutcome.OK, scrape.ScrapeOutcome.STANDBY)  # a standby is no failure
    return served, f"metrics: {got.outcome}{more}: {got.detail}"


def main(args: argparse.Namespace) -> int:
    settings = settings_from(ProbeSettings, args)
    url, timeout, tls = settings.url, settings.timeout_seconds, settings.ca
    if tls is not None:
        tls.check_hostname = False  # the chain is checked; the probe's 127.0.0.1 is no name in it
    cred = settings.credential
    if args.which == "controller":
        ok, message = asyncio.run(check_controller(url, timeout, settings.controller, cred=cred))
    elif args.which == "metrics":
        ok, message = asyncio.run(check_metrics(url, settings.path, timeout, cred=cred))
    elif args.which in restd.CHECKS:
        token = read_token(settings.token_file) if settings.token_file else None
        ok, message = asyncio.run(restd.check(url, args.which, timeout, token))
    else:
        ok, message = asyncio.run(check(url, args.which, timeout, tls))
    print(message, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1
