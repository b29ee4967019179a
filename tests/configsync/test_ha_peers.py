"""What a config-sync takes from its peers' /status: only a well-formed answer counts, a writer is
followed only when exactly one peer says its controller is in control, and every refusal says why."""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from sidecars.configsync.ha.coordination import PEER_BODY_BYTES, Coordination
from sidecars.configsync.peers import others
from sidecars.configsync.settings import Settings, configure, from_args
from sidecars.runtime.http import serve
from sidecars.runtime.settings import ConfigError
from tests.runtime.test_server_bounds import Certs, certs  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(30)

SHA = "a" * 64


def status(role: str = "in control", sha: str | None = SHA, controller: str = "ctld-a") -> dict[str, Any]:
    return {
        "applied": None if sha is None else {"generation": 3, "sha256": sha},
        "pending": False,
        "ha": {"controller": controller, "role": role},
    }


@pytest.fixture
async def peers() -> AsyncIterator[str]:
    """One server answering every kind of /status at its own path (`/<kind>/status`)."""
    answers: dict[str, web.Response] = {
        "writer": web.json_response(status()),
        "standby": web.json_response(status("standby", controller="ctld-c")),
        "second-writer": web.json_response(status(controller="ctld-c")),
        "not-json": web.Response(text="<html>"),
        "a-list": web.json_response([1, 2]),
        "no-ha": web.json_response({"applied": {"sha256": SHA}, "pending": False}),
        "bad-sha": web.json_response(status(sha="../etc")),
        "sha-not-hex": web.json_response(status(sha="g" * 63 + "\n")),
        # the issue's: 200,024 characters with a newline were taken as a controller's name
        "huge-controller": web.json_response(status(controller="c" * 100_000 + "\nforged " + "c" * 100_017)),
        "two-line-controller": web.json_response(status(controller="ctld-a\nctld-z in control")),
        "bad-role": web.json_response(status(role="emperor")),
        "refused": web.Response(status=401),
        "huge": web.Response(body=json.dumps(status() | {"pad": "x" * PEER_BODY_BYTES}).encode()),
    }

    async def answer(request: web.Request) -> web.Response:
        r = answers[request.match_info["kind"]]
        return web.Response(body=r.body, status=r.status, content_type=r.content_type)

    app = web.Application()
    app.router.add_get("/{kind}/status", answer)
    async with serve(app, "127.0.0.1", 0) as port:
        yield f"http://127.0.0.1:{port}"


def coordination(base: str, *kinds: str) -> Coordination:
    return Coordination("ctld-b", tuple(f"{base}/{k}" for k in kinds), CollectorRegistry())


async def test_one_writer_is_followed(peers: str) -> None:
    c = coordination(peers, "writer", "standby")
    assert not c.in_step(SHA) and c.writer()[0] is None  # nobody heard yet: nothing agreed
    await c.refresh_peers()
    writer, why = c.writer()
    assert writer is not None and writer.controller == "ctld-a" and writer.applied_sha256 == SHA and why == ""
    assert c.in_step(SHA)  # both answered, both hold it
    assert not c.in_step("b" * 64)
    assert [p.error for p in c.peers] == [None, None]


async def test_two_writers_or_none_are_not_followed(peers: str) -> None:
    c = coordination(peers, "writer", "second-writer")
    await c.refresh_peers()
    assert c.writer() == (None, "several peers say their controller is in control")
    c = coordination(peers, "standby")
    await c.refresh_peers()
    writer, why = c.writer()
    assert writer is None and why == "no peer's controller is in control"


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("not-json", "/status is not JSON"),
        ("a-list", "not a JSON object"),
        ("no-ha", "without --peer"),
        ("bad-sha", "expected shape"),
        ("sha-not-hex", "expected shape"),
        ("huge-controller", "expected shape"),
        ("two-line-controller", "expected shape"),
        ("bad-role", "expected shape"),
        ("refused", "answered 401"),
        ("huge", f"larger than {PEER_BODY_BYTES} bytes"),
        ("nothing-here", "answered 500"),
    ],
)
async def test_a_bad_answer_is_an_error_never_a_writer(peers: str, kind: str, said: str) -> None:
    c = coordination(peers, kind)
    [peer] = await c.refresh_peers()
    assert peer.error is not None and said in peer.error, peer
    assert peer.applied_sha256 is None and peer.role is None
    writer, why = c.writer()
    assert writer is None and said in why
    assert not c.in_step(SHA)


async def test_an_unreachable_peer_says_so() -> None:
    c = Coordination("ctld-b", ("http://127.0.0.1:9",), CollectorRegistry())
    [peer] = await c.refresh_peers()
    assert peer.error is not None and peer.error.startswith("unreachable")
    assert not c.in_step(SHA)


PODS = (
    "http://slurmctld-0.slurmctld.slurm.svc.cluster.local.:9100",
    "http://slurmctld-1.slurmctld.slurm.svc.cluster.local.:9100",
    "http://slurmctld-10.slurmctld.slurm.svc.cluster.local.:9100",
)


@pytest.mark.parametrize(
    ("pod", "asked"),
    [
        ("slurmctld-0", PODS[1:]),
        ("slurmctld-1", (PODS[0], PODS[2])),  # not slurmctld-10: the name ends at a dot
        ("slurmctld-10", PODS[:2]),
        (None, PODS),  # no name given: every peer is another pod
        ("elsewhere", PODS),
    ],
)
def test_a_pod_leaves_itself_out_of_the_shared_peer_list(pod: str | None, asked: tuple[str, ...]) -> None:
    assert others(PODS, pod) == asked


@pytest.mark.parametrize(
    ("peers", "pod", "said"),
    [
        ((PODS[0],), "slurmctld-0", "every peer given is this pod"),
        ((PODS[0], PODS[0].replace("9100", "9101")), None, "name the same host"),
        # relative names go through the DNS search list (a namespace named `slurmctld` would answer)
        (("http://slurmctld-0.slurmctld:9100",), None, "fully qualified name ending in a dot"),
        (("https://slurmctld-0.slurmctld.slurm.svc.cluster.local:9100",), None, "ending in a dot"),
        (("http://localhost:9100",), None, "ending in a dot"),
        (("http://:9100",), None, "names no host"),
        (("http://[::1/status",), None, "is not a URL"),
    ],
)
def test_a_peer_list_that_cannot_work_is_refused(peers: tuple[str, ...], pod: str | None, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        others(peers, pod)


def test_the_command_line_drops_this_pod_and_says_why_it_refuses(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    base = ["--source", str(tmp_path / "src"), "--target", str(tmp_path / "etc"), "--http", "127.0.0.1:0"]
    peers = [w for p in PODS[:2] for w in ("--peer", p)]
    settings = _settings([*base, *peers, "--pod-name", "slurmctld-1"])
    assert settings.peers == (PODS[0],) and settings.pod_name == "slurmctld-1"
    with pytest.raises(ConfigError, match="every peer given is this pod"):
        _settings([*base, "--peer", PODS[0], "--pod-name", "slurmctld-0"])


def _settings(argv: list[str]) -> Settings:
    parser = argparse.ArgumentParser()
    configure(parser)
    return from_args(parser.parse_args(argv))


async def test_each_peer_behind_a_set_is_named_with_why(peers: str) -> None:
    c = coordination(peers, "writer", "standby", "not-json")
    assert c.behind(SHA) == [f"{peers}/{k}: not asked yet" for k in ("writer", "standby", "not-json")]
    await c.refresh_peers()
    assert c.behind(SHA) == [f"{peers}/not-json: /status is not JSON"]  # the others hold it
    other = "b" * 64
    assert c.behind(other) == [
        f"ctld-a (in control): holds {SHA[:12]}",
        f"ctld-c (standby): holds {SHA[:12]}",
        f"{peers}/not-json: /status is not JSON",
    ]


def test_a_peer_is_an_ip_address_or_a_name_ending_in_a_dot() -> None:
    given = (
        "http://10.0.0.7:9100",
        "http://[fd00::7]:9100",
        "https://ctld-1.ctld.slurm.svc.example.org.:9100",
    )
    assert others(given, None) == given


async def test_an_https_peer_is_checked_against_the_peer_ca_file(certs: Certs, tmp_path: Path) -> None:  # noqa: F811
    async def answer(_: web.Request) -> web.Response:
        return web.json_response(status())

    app = web.Application()
    app.router.add_get("/status", answer)
    async with serve(app, "127.0.0.1", 0, tls=certs.server()) as port:
        url = f"https://127.0.0.1:{port}"
        (tmp_path / "src").mkdir()
        argv = ["--source", str(tmp_path / "src"), "--target", str(tmp_path / "etc"), "--http", "127.0.0.1:0"]
        settings = _settings(
            [*argv, "--peer", url, "--peer-ca-file", str(certs.ca), "--controller", "ctld-b"]
        )
        trusted = Coordination("ctld-b", settings.peers, CollectorRegistry(), tls=settings.peer_tls)
        [peer] = await trusted.refresh_peers()
        assert peer.error is None and peer.role == "in control", peer
        # without the CA file: the system's roots, which do not know this CA; never taken unchecked
        unknown = Coordination("ctld-b", (url,), CollectorRegistry())
        [peer] = await unknown.refresh_peers()
        assert peer.error is not None and "certificate" in peer.error, peer
        assert peer.role is None and unknown.writer()[0] is None
    with pytest.raises(ConfigError, match="--peer-ca-file"):
        _settings([*argv, "--peer", url, "--peer-ca-file", str(tmp_path / "none.pem")])
