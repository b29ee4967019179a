"""Readiness of a node that runs IMEX jobs: with `SwitchType=switch/nvidia_imex` in slurm.conf,
Slurm hands each job an IMEX channel (`/dev/nvidia-caps-imex-channels/channelN`, made by the
NVIDIA driver or the DRA driver's IMEX daemon); a node without it cannot run them, so the pod is
not ready, and says why. Without that SwitchType the check passes and looks at nothing.

slurm.conf is read as a file (the agent's SLURM_CONF; configless: the copy slurmd keeps), not by
asking slurmctld: a coordinated agent makes no Slurm query of its own. Re-read when it changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sidecars.runtime.checks import CheckResult

IMEX_SWITCH = "switch/nvidia_imex"
DEFAULT_CONF = Path("/etc/slurm/slurm.conf")


def switch_type(text: str) -> str | None:
    """The last SwitchType= in slurm.conf text (keys are case-insensitive; # starts a comment)."""
    found = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() == "switchtype":
            found = value.strip().split()[0] if value.strip() else ""
    return found


class ImexCheck:
    def __init__(self, channel: Path, env: Mapping[str, str]) -> None:
        self.channel = channel
        self.conf = Path(env["SLURM_CONF"]) if env.get("SLURM_CONF") else DEFAULT_CONF
        self._seen: tuple[float, bool] | None = None  # (mtime, imex configured)

    def required(self) -> bool:
        try:
            mtime = self.conf.stat().st_mtime
            if self._seen is None or self._seen[0] != mtime:
                self._seen = (mtime, switch_type(self.conf.read_text(errors="replace")) == IMEX_SWITCH)
        except OSError:
            return False if self._seen is None else self._seen[1]  # slurm.conf not there yet: as last read
        return self._seen[1]

    def check(self) -> CheckResult:
        if not self.required():
            return CheckResult(True, f"SwitchType is not {IMEX_SWITCH}: no IMEX channel needed")
        if self.channel.exists():
            return CheckResult(True, f"IMEX channel {self.channel} present")
        return CheckResult(False, f"SwitchType={IMEX_SWITCH} but IMEX channel {self.channel} is missing")
