"""An upgrade's budget and the drain reason that marks its workers: the rules of a paced roll that
need no Kubernetes (the demo paces its own roll by them, see sidecars/demo/roll.py)."""

from __future__ import annotations

import math


class UpgradeError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def parse_budget(text: str, total: int) -> int:
    """`3` or `25%` of `total` workers (rounded up, at least 1); 0 is refused (nothing would move)."""
    raw = text.strip() if isinstance(text, str) else ""
    pct = raw.endswith("%")
    digits = raw[:-1] if pct else raw
    if not digits.isdigit():
        raise UpgradeError(422, f"bad budget {text!r}: a number of workers or a percentage, e.g. 2 or 25%")
    value = int(digits)
    if value == 0:
        raise UpgradeError(422, "a budget of 0 would never drain a worker: give 1 or more (or a percentage)")
    if pct:
        if value > 100:
            raise UpgradeError(422, f"bad budget {text!r}: at most 100%")
        return max(1, math.ceil(total * value / 100))
    return value
