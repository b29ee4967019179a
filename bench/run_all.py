"""`make bench`: run every benchmark here and print one table, our figures beside each baseline.

Each benchmark script prints whatever detail it likes, and one line per headline figure:

    RESULT <id> | <what> | <ours> | <baseline> | <goal> | <met: yes/no>

This runner collects those lines into the table. It runs the scripts one after the other (they
share this machine's two cores) with their default, CI-sized settings.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent


def main() -> int:
    scripts = sorted(
        p for p in HERE.glob("*.py") if p.name != Path(__file__).name and not p.name.startswith("_")
    )
    rows: list[list[str]] = []
    failed: list[str] = []
    for script in scripts:
        print(f"== {script.name}", flush=True)
        started = time.monotonic()
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False)
        print(proc.stdout, end="")
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            failed.append(script.name)
        found = [
            line.removeprefix("RESULT ").split(" | ")
            for line in proc.stdout.splitlines()
            if line.startswith("RESULT ")
        ]
        rows += [r + [""] * (6 - len(r)) for r in found]
        print(f"   ({time.monotonic() - started:.0f}s)\n", flush=True)
    headers = ["id", "what", "ours", "baseline (same run)", "goal", "met"]
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    print("Benchmarks on this machine")
    for row in [headers, ["-" * w for w in widths], *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
