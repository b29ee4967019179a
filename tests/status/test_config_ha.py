"""`slurm-sidecars status` with HA controllers: a generation that config-sync says is not yet on
every controller pod (configsync/ha/rollout.py) is not shown as applied."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.status.invocation import status
from tests.status.servers import config_sync_app, control_plane_app, serving

pytestmark = pytest.mark.timeout(30)

TOKEN = "t0ken-for-tests-5c1d8e2f7a9b3c40"
AT = "2026-12-02T04:00:00Z"


def body(outcome: str, words: str | None, behind: list[str]) -> dict[str, Any]:
    return {
        "applied": {"generation": 3, "sha256": "ab" * 32, "at": AT, "outcome": outcome},
        "rejected": None,
        "pending": False,
        "ha": {"rollout": {"state": "?", "words": words, "behind": behind}},
    }


@pytest.mark.parametrize(
    ("outcome", "words", "behind", "line"),
    [
        ("applied", "every controller holds it: a, b", [], f"applied at {AT}"),
        (
            "staging",
            "on a (in control); staging on b (standby): holds 0123456789ab",
            ["b (standby): holds 0123456789ab"],
            f"staging since {AT}: on a (in control); staging on b (standby): holds 0123456789ab",
        ),
        (
            "not_everywhere",
            None,
            ["http://b:9100: unreachable", "http://c:9100: /status is not JSON"],
            f"not everywhere since {AT}: http://b:9100: unreachable; http://c:9100: /status is not JSON",
        ),
    ],
)
async def test_a_generation_not_on_every_controller_is_not_shown_applied(
    tmp_path: Path, outcome: str, words: str | None, behind: list[str], line: str
) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    async with (
        serving(control_plane_app(TOKEN, [], [])) as cp,
        serving(config_sync_app(body(outcome, words, behind))) as cs,
    ):
        r = await status("--control-plane", cp, "--token-file", str(token), "--config-sync", cs)
    assert r.code == 0, r.err
    first = r.out.split("CONFIG\n", 1)[1].splitlines()[0]
    assert first == f"generation 3, sha256 {'ab' * 6}, {line}"
