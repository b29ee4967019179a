"""A bad invocation of `status` is exit 2 with one line saying what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.status.invocation import status


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--control-plane", "cp:9200", "--token-file", "{tok}"], "--control-plane must be an http(s) URL"),
        (["--control-plane", "http://127.0.0.1:9"], "--control-plane needs --token-file"),
        (["--token-file", "{tok}"], "--token-file is only used with --control-plane or --config-sync"),
        (["--control-plane", "http://127.0.0.1:9", "--token-file", "{missing}"], "--token-file: cannot read"),
        (["--control-plane", "http://127.0.0.1:9", "--token-file", "{empty}"], "is empty"),
        (["--config-sync", "127.0.0.1:9100"], "--config-sync must be an http(s) URL"),
        (["--timeout-seconds", "soon"], "--timeout-seconds: expected a number"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
async def test_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "tok").write_text("x")
    (tmp_path / "empty").write_text("\n")
    paths = {"tok": tmp_path / "tok", "missing": tmp_path / "nope", "empty": tmp_path / "empty"}
    r = await status(*[a.format(**paths) for a in args])
    assert r.code == 2
    assert message in r.err
    assert r.out == ""
