"""A plan as Markdown, ready for a pull-request comment.

What the files hold and Slurm says is quoted in fenced blocks whose fence is longer than any run
of backticks in the text, so no file can close the block and write the comment's Markdown itself.
"""

from __future__ import annotations

import re
from typing import Any

TITLES = {
    "would-apply": "would apply",
    "no-change": "no change",
    "refused": "refused",
    "held-for-jobs": "held for jobs",
    "restart-required": "restart required",
}


def fenced(text: str, lang: str = "text") -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{fence}{lang}\n{body}{fence}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(plan: dict[str, Any]) -> str:
    """`plan` as `Plan.as_json()` (or config-sync's `POST /v1/plan`) gives it."""
    verdict = plan["verdict"]
    live = plan.get("live_sha256")
    against = f"against the live set `{live[:12]}`" if live else "with no live set to compare"
    out = [
        f"## slurm-sidecars plan: {TITLES.get(verdict, verdict)}",
        "",
        f"Candidate `{plan['sha256'][:12]}` {against}. Exit code {plan['exit_code']}.",
        "",
    ]
    if plan.get("reason"):
        out += ["### Why", "", fenced(plan["reason"]), ""]
    if plan.get("jobs"):
        out += [
            "### Jobs it would end, requeue or strand",
            "",
            "| job | what the change would do |",
            "|---|---|",
        ]
        out += [f"| {j['job_id']} | {_cell(j['why'])} |" for j in plan["jobs"]]
        out.append("")
    if plan.get("wipes"):
        out += [
            "### Run-time node state its reconfigure or restart would wipe (config-sync puts it back)",
            "",
            "| attribute | nodes |",
            "|---|---|",
        ]
        out += [f"| {a} | {_cell(', '.join(n))} |" for a, n in sorted(plan["wipes"].items())]
        out.append("")
    if plan.get("restart"):
        out += ["### Why slurmctld must restart", ""] + [f"- {_cell(r)}" for r in plan["restart"]] + [""]
    files = plan.get("files") or []
    out += ["### Files", ""]
    if not files:
        out += ["No file changes.", ""]
    for f in files:
        out += [f"<details><summary><code>{_cell(f['name'])}</code> {f['change']}</summary>", ""]
        if f.get("diff"):
            out += [fenced(f["diff"], "diff"), ""]
        if f.get("note"):
            out += [f"_{_cell(f['note'])}_", ""]
        out += ["</details>", ""]
    if plan.get("checks"):
        out += ["### Checks run", ""] + [f"- {c}" for c in plan["checks"]] + [""]
    if plan.get("not_checked"):
        out += ["### Not checked", ""] + [f"- {c}" for c in plan["not_checked"]] + [""]
    if plan.get("dry_run_seconds") is not None:
        out += [f"The dry run took {plan['dry_run_seconds']:.2f} s.", ""]
    return "\n".join(out)
