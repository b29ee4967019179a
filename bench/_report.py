"""The one line per headline figure that `run_all.py` collects into its table."""

from __future__ import annotations

from sidecars.devcluster import Release
from sidecars.devcluster.release import available_releases, build_chroot, host_release

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


async def releases(choice: str) -> list[Release]:
    """The Slurm releases to measure: `host`, `chroot` (built if need be), or `both` (24.11 only when
    its chroot is already built: a benchmark never spends half a minute building it)."""
    if choice != "both":
        return [await (host_release() if choice == "host" else build_chroot())]
    found, missing = await available_releases(build=False)
    for why in missing:
        print(f"not measured: {why}")
    return found
