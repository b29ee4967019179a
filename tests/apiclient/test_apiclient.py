"""The operator's commands' one client of the control plane: the flags it reads, the request it
sends, and the exit code each kind of answer becomes, over real HTTP."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from sidecars.cli import build_parser
from sidecars.operator.client import ControlPlaneClient, Request, answer, control_plane_flags
from sidecars.operator.maintenance import MaintenanceSettings
from sidecars.operator.upgrade import UpgradeSettings
from sidecars.runtime.settings import ConfigError, http_url
from tests.status.servers import serving

TOKEN = "s3cret-3f9b0d6e1c8a7b25d4e0c9a1f7"


def args_of(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    control_plane_flags(p)
    return p.parse_args(argv)


def test_the_flags_become_a_control_plane(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text(f"{TOKEN}\n")
    args = args_of("--control-plane", "http://cp:9200/", "--token-file", f"{tmp_path}/tok")
    cp = ControlPlaneClient.from_args(args)
    assert cp == ControlPlaneClient(url="http://cp:9200", token=TOKEN, timeout_seconds=30.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--token-file", "{tok}"], "--control-plane is required"),
        (["--control-plane", "cp:9200", "--token-file", "{tok}"], "--control-plane must be an http(s) URL"),
        (["--control-plane", "http://cp"], "--token-file is required"),
        (["--control-plane", "http://cp", "--token-file", "{tok}.nope"], "--token-file: cannot read"),
        (["--control-plane", "http://cp", "--token-file", "{tok}", "--timeout-seconds", "0"], "must be > 0"),
    ],
)
def test_a_bad_flag_is_one_config_error(tmp_path: Path, argv: list[str], message: str) -> None:
    (tmp_path / "tok").write_text(TOKEN)
    with pytest.raises(ConfigError, match=r"^[^\n]*$") as err:
        ControlPlaneClient.from_args(args_of(*[a.format(tok=tmp_path / "tok") for a in argv]))
    assert message in str(err.value)


def test_http_url_drops_the_trailing_slash_and_refuses_anything_else() -> None:
    assert http_url("https://cp.example:9200//", "--x") == "https://cp.example:9200"
    for bad in ("", None, "cp:9200", "ftp://cp"):
        with pytest.raises(ConfigError, match="--x must be an http"):
            http_url(bad, "--x")


def answering(status: int, body: bytes, seen: list[tuple[str, str, str | None, bytes]]) -> web.Application:
    """Answers every request with `status` and `body`, recording method, path, bearer and body."""

    async def handle(request: web.Request) -> web.Response:
        bearer = request.headers.get("Authorization")
        seen.append((request.method, request.path, bearer, await request.read()))
        return web.Response(status=status, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


@pytest.mark.parametrize(
    ("status", "body", "code", "stderr"),
    [
        (200, b'{"paused": true}', 0, ""),
        (202, b"", 0, ""),  # an empty answer is shown as None
        (409, b'{"error": "it overlaps one"}', 2, "slurm-sidecars upgrade: it overlaps one\n"),
        (404, b'["not", "a dict"]', 2, "slurm-sidecars upgrade: ['not', 'a dict']\n"),
        (503, b'{"error": "not the leader"}', 1, "slurm-sidecars upgrade: not the leader\n"),
        (200, b"<html>", 1, "slurm-sidecars upgrade: control plane unreachable: "),
    ],
)
async def test_each_answer_becomes_its_exit_code(
    capsys: pytest.CaptureFixture[str], status: int, body: bytes, code: int, stderr: str
) -> None:
    seen: list[tuple[str, str, str | None, bytes]] = []
    shown: list[Any] = []
    async with serving(answering(status, body, seen)) as url:
        cp = ControlPlaneClient(url=url, token=TOKEN, timeout_seconds=10)
        got = await answer("upgrade", cp, Request(method="POST", path="/v1/upgrade/pause"), shown.append)
    assert got == code
    assert seen == [("POST", "/v1/upgrade/pause", f"Bearer {TOKEN}", b"")]
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(stderr) and err.count("\n") == (1 if stderr else 0), err
    assert shown == ([] if code else [{"paused": True} if body else None])


async def test_the_body_goes_as_json_with_the_method_asked() -> None:
    seen: list[tuple[str, str, str | None, bytes]] = []
    async with serving(answering(200, b"{}", seen)) as url:
        cp = ControlPlaneClient(url=url, token=TOKEN, timeout_seconds=10)
        assert await answer("m", cp, Request(method="DELETE", path="/v1/maintenance/x"), print) == 0
        req = Request(method="POST", path="/v1/maintenance", body={"nodes": "n[1-2]"})
        assert await answer("m", cp, req, print) == 0
    assert seen == [
        ("DELETE", "/v1/maintenance/x", f"Bearer {TOKEN}", b""),
        ("POST", "/v1/maintenance", f"Bearer {TOKEN}", b'{"nodes": "n[1-2]"}'),
    ]


async def test_nobody_listening_is_exit_1_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # bound, never listening: a connection is refused at once
        s.bind(("127.0.0.1", 0))
        cp = ControlPlaneClient(url=f"http://127.0.0.1:{s.getsockname()[1]}", token=TOKEN, timeout_seconds=10)
        assert await answer("maintenance", cp, Request(method="GET", path="/v1/maintenance"), print) == 1
    err = capsys.readouterr().err
    assert err.startswith("slurm-sidecars maintenance: control plane unreachable: ") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "sent"),
    [
        (["maintenance", "list"], Request(method="GET", path="/v1/maintenance")),
        (["maintenance", "delete", "w1"], Request(method="DELETE", path="/v1/maintenance/w1")),
        (
            ["maintenance", "create", "w1", "--nodes", "n1", "--duration", "1h", "--reason", "disk"],
            Request(
                method="POST",
                path="/v1/maintenance",
                body={"nodes": "n1", "start": "now", "duration": "1h", "reason": "disk", "name": "w1"},
            ),
        ),
        (["upgrade", "status"], Request(method="GET", path="/v1/upgrade")),
        (["upgrade", "pause"], Request(method="POST", path="/v1/upgrade/pause")),
        (["upgrade", "resume"], Request(method="POST", path="/v1/upgrade/resume")),
        (
            ["upgrade", "start", "--revision", "r2", "--upgrade-budget", "10%"],
            Request(method="POST", path="/v1/upgrade", body={"revision": "r2", "budget": "10%"}),
        ),
    ],
)
def test_each_action_of_the_commands_is_one_request(tmp_path: Path, argv: list[str], sent: Request) -> None:
    (tmp_path / "tok").write_text(TOKEN)
    parser, _ = build_parser(only=argv[0])
    args = parser.parse_args([*argv, "--control-plane", "http://cp:9200", "--token-file", f"{tmp_path}/tok"])
    settings = (MaintenanceSettings if argv[0] == "maintenance" else UpgradeSettings).from_args(args)
    want = ControlPlaneClient(url="http://cp:9200", token=TOKEN, timeout_seconds=30.0)
    assert settings.control_plane == want
    assert settings.request() == sent
