"""A standby's 303 is input from the network: followed once, only to a controller of this cluster
(a `SlurmctldHost` of our slurm.conf, as written; the port and path asked; no user or password),
else reported as "standby" and never fetched, so a token never goes elsewhere. Real local servers
play the controllers."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from sidecars.runtime import http
from sidecars.slurm import scrape, standby
from sidecars.slurm.httpauth import TOKEN_HEADER, Credential, mint

ASKED = "http://ctld-b:6817/metrics/jobs"


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("http://ctld-a:6817/metrics/jobs", None),
        ("http://10.0.0.2:6817/metrics/jobs", None),
        ("http://evil.example:6817/metrics/jobs", "host 'evil.example' is no SlurmctldHost of this cluster"),
        ("https://ctld-a:6817/metrics/jobs", "scheme 'https', not 'http'"),
        ("http://ctld-a:9999/metrics/jobs", "port 9999 is not SlurmctldPort 6817"),
        ("http://ctld-a:6817/openapi/v0.0.45/conf", "it names another path"),
        ("http://ctld-a:6817/metrics/jobs?x=1", "it names another path"),
        ("http://u:p@ctld-a:6817/metrics/jobs", "it carries a user or password"),
        ("http://ctld-b:6817/metrics/jobs", "it names the controller asked"),
        ("/metrics/jobs", "scheme 'none', not 'http'"),
        ("http://ctld-a:99999/metrics/jobs", "its port is not a port"),
        ("file:///etc/slurm/jwt_hs256.key", "scheme 'file', not 'http'"),
    ],
)
def test_only_a_controller_of_this_cluster_at_the_same_port_and_path_is_followed(
    location: str, why: str | None
) -> None:
    conf = "SlurmctldHost=ctld-a(10.0.0.2)\nSlurmctldHost=ctld-b(10.0.0.3)\n"
    assert standby.host_addresses(conf) == {"ctld-a", "10.0.0.2", "ctld-b", "10.0.0.3"}
    assert scrape.refuse_location(ASKED, location, standby.host_addresses(conf)) == why


async def test_a_redirect_elsewhere_is_never_fetched_and_a_second_one_never_followed(tmp_path: Path) -> None:
    seen: list[tuple[str, str | None]] = []
    key = tmp_path / "key"
    key.write_bytes(b"k" * 32)
    key.chmod(0o600)
    cred = Credential(key_file=key, user="root")

    def app(to_host: str | None) -> web.Application:
        """A controller: serving (None), or a standby sending each request to `to_host`, at the
        port it was asked on (as Slurm's does: SlurmctldPort) unless `to_host` gives one."""

        async def handler(request: web.Request) -> web.Response:
            seen.append((f"{request.host}{request.path}", request.headers.get(TOKEN_HEADER)))
            if to_host is None:
                return web.Response(text="slurm_jobs 0\n")
            where = to_host if ":" in to_host else f"{to_host}:{request.url.port}"
            raise web.HTTPSeeOther(f"http://{where}{request.path}")

        a = web.Application()
        a.router.add_get("/{tail:.*}", handler)
        return a

    async with http.serve(app(None), "127.0.0.1", 0) as evil:
        # a standby that sends us to a host our slurm.conf does not name: reported, not fetched
        async with (
            http.serve(app(f"localhost:{evil}"), "127.0.0.1", 0) as port,
            aiohttp.ClientSession() as s,
        ):
            got = await scrape.scrape(
                s, f"http://127.0.0.1:{port}/metrics", controllers={"127.0.0.1"}, credential=cred
            )
        assert (
            got.outcome is scrape.ScrapeOutcome.STANDBY and "'localhost' is no SlurmctldHost" in got.detail
        ), got
        assert [p for p, _ in seen] == [f"127.0.0.1:{port}/metrics"], seen

    # two standbys pointing at each other, on one port at two addresses: one hop, then "standby"
    seen.clear()
    async with contextlib.AsyncExitStack() as stack:
        shared = await _one_port_two_addresses(stack, lambda: app("127.0.0.1"), lambda: app("127.0.0.2"))
        s = await stack.enter_async_context(aiohttp.ClientSession())
        got = await scrape.scrape(
            s,
            f"http://127.0.0.1:{shared}/metrics/jobs",
            controllers={"127.0.0.1", "127.0.0.2"},
            credential=cred,
        )
    assert got.outcome is scrape.ScrapeOutcome.STANDBY and "both answer 303" in got.detail, got
    assert [p for p, _ in seen] == [f"127.0.0.1:{shared}/metrics/jobs", f"127.0.0.2:{shared}/metrics/jobs"]
    assert all(t is not None for _, t in seen), seen  # our own controllers: the token went with it


async def _one_port_two_addresses(
    stack: contextlib.AsyncExitStack, on_2: Callable[[], web.Application], on_1: Callable[[], web.Application]
) -> int:
    """`on_2` served at 127.0.0.2 and `on_1` at 127.0.0.1, on one port (a port free at .2 may be
    taken at .1 by a neighbour: then another one)."""
    for _ in range(20):
        inner = contextlib.AsyncExitStack()
        port = await inner.enter_async_context(http.serve(on_2(), "127.0.0.2", 0))
        try:
            await inner.enter_async_context(http.serve(on_1(), "127.0.0.1", port))
        except OSError:
            await inner.aclose()
            continue
        await stack.enter_async_context(inner)
        return port
    raise AssertionError("no port free at both 127.0.0.1 and 127.0.0.2 in 20 tries")


def test_a_minted_token_is_what_auth_jwt_reads() -> None:
    import base64
    import json

    head, body, _ = mint(b"k" * 32, "slurm", 60, now=1000).split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    assert claims == {"iat": 1000, "exp": 1060, "sun": "slurm"}
    assert json.loads(base64.urlsafe_b64decode(head + "==")) == {"alg": "HS256", "typ": "JWT"}
