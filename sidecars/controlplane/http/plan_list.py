"""config-sync's `GET /v1/plans`, checked before the page shows it: only the fields the page uses, of
the types it expects, each bounded. An answer of any other shape is refused whole (the feed keeps
what it read before and says why), so junk from a broken or impostor config-sync never reaches the
browser, and a plan that lists 10,000 jobs cannot swell every viewer's document.
"""

from __future__ import annotations

import re
from typing import Any

PLANS_SHOWN = 50  # config-sync keeps 20; more is not a list a person reads
TEXT_CHARS = 4000  # Slurm's words are a few lines (configsync.plan keeps six)
LIST_ITEMS = 256  # files of a set (config-sync's own cap), restart reasons, jobs named
_VERDICT = re.compile(r"^[a-z][a-z-]{0,31}$")  # "would-apply", "held-for-jobs": a CSS class on the page


class NotPlans(ValueError):
    """Not the answer of a config-sync's GET /v1/plans; the message says what is wrong."""


def _text(value: Any, where: str, *, null: bool = False) -> str | None:
    if value is None and null:
        return None
    if not isinstance(value, str):
        raise NotPlans(f"{where}: a string is expected")
    return value if len(value) <= TEXT_CHARS else value[:TEXT_CHARS] + " [cut]"


def _items(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise NotPlans(f"{where}: a list is expected")
    return value[:LIST_ITEMS]


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise NotPlans(f"{where}: a count is expected")
    return value


def _plan(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise NotPlans(f"{where}: an object is expected")
    verdict = raw.get("verdict")
    if not isinstance(verdict, str) or not _VERDICT.match(verdict):
        raise NotPlans(f"{where}.verdict: not a verdict")
    seconds = raw.get("dry_run_seconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int | float)):
        raise NotPlans(f"{where}.dry_run_seconds: a number or null is expected")
    files = []
    for i, f in enumerate(_items(raw.get("files", []), f"{where}.files")):
        if not isinstance(f, dict):
            raise NotPlans(f"{where}.files[{i}]: an object is expected")
        files.append(
            {
                "name": _text(f.get("name"), f"{where}.files[{i}].name"),
                "change": _text(f.get("change"), f"{where}.files[{i}].change"),
            }
        )
    jobs = [_count(j, f"{where}.jobs") for j in _items(raw.get("jobs", []), f"{where}.jobs")]
    return {
        "at": _text(raw.get("at"), f"{where}.at"),
        "verdict": verdict,
        "sha256": _text(raw.get("sha256"), f"{where}.sha256"),
        "live_sha256": _text(raw.get("live_sha256"), f"{where}.live_sha256", null=True),
        "reason": _text(raw.get("reason", ""), f"{where}.reason"),
        "restart": [_text(r, f"{where}.restart") for r in _items(raw.get("restart", []), f"{where}.restart")],
        "dry_run_seconds": seconds,
        "files": files,
        "jobs": jobs,
        "jobs_total": max(len(jobs), _count(raw.get("jobs_total", len(jobs)), f"{where}.jobs_total")),
    }


def plans_of(body: Any) -> tuple[bool, list[dict[str, Any]]]:
    """(whether config-sync serves plans, its recent plans newest first), or NotPlans."""
    if not isinstance(body, dict):
        raise NotPlans("/v1/plans: not a JSON object")
    served, plans = body.get("served"), body.get("plans")
    if not isinstance(served, bool) or not isinstance(plans, list):
        raise NotPlans("/v1/plans: no 'served' flag or 'plans' list")
    return served, [_plan(p, f"/v1/plans: plans[{i}]") for i, p in enumerate(plans[:PLANS_SHOWN])]
