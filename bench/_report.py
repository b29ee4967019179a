"""The one line per headline figure that `run_all.py` collects into its table."""

from __future__ import annotations

SEP = " | "


def result(rid: str, what: str, ours: str, baseline: str, goal: str, met: bool) -> None:
    """Print `RESULT <id> | <what> | <ours> | <baseline> | <goal> | <met>`.

    The fields are free text but must not contain the separator, or the table would shift columns.
    """
    fields = [rid, what, ours, baseline, goal, "yes" if met else "no"]
    for field in fields:
        if SEP.strip() in field:
            raise ValueError(f"RESULT field contains the separator: {field!r}")
    print("RESULT " + SEP.join(fields), flush=True)
