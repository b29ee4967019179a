"""No module in the package over 400 lines (issue 26): past that a module holds more than one
activity, and a newcomer cannot see it whole."""

from __future__ import annotations

from pathlib import Path

import sidecars

LIMIT_LINES = 400


def test_no_module_is_over_the_limit() -> None:
    root = Path(sidecars.__file__).parent
    over = {
        str(p.relative_to(root)): n
        for p in root.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > LIMIT_LINES
    }
    assert over == {}, f"split by activity: {over}"
