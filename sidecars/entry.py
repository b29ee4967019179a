"""The process's entry (`slurm-sidecars`, `python -m sidecars`): what must precede every other import."""

from __future__ import annotations

import sys


def main() -> int:
    # structlog imports `rich` for its development renderer whenever it is installed (our dev tools
    # bring it, the images do not): ~5 MB resident in every daemon, for a renderer none of them uses
    sys.modules.setdefault("rich", None)  # type: ignore[arg-type]
    from sidecars.cli import main as run  # after the line above: it imports structlog

    return run()
