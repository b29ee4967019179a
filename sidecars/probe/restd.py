"""`slurm-sidecars probe restd-livez|restd-readyz --url http://127.0.0.1:6820 --token-file F`:
slurmrestd's exec probes, on every release (see `sidecars.slurm.restd` for what each one answers).

Live: slurmrestd answers HTTP (its own `/livez` on 26.05). Ready: its own `/readyz` where served,
and a controller of the SlurmctldHost list responds through it (26.05's own `/readyz` stays 204 with
every controller down). The token is the one the pod's callers present (Slinky's operator mounts
it from a Secret): read from its file at each run, never printed.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from sidecars.slurm import restd

CHECKS = {"restd-livez": "livez", "restd-readyz": "readyz"}


async def check(url: str, which: str, timeout: float, token: str | None) -> tuple[bool, str]:
    target = urlsplit(url)
    if target.scheme != "http":
        return False, f"{which}: slurmrestd is probed over plain http on its pod's address, not {url}"
    answer = await restd.check(
        target.hostname or "127.0.0.1", target.port or 80, CHECKS[which], token, timeout
    )
    return answer.ok, f"{which}: {'ok' if answer.ok else 'failing'}: {answer.detail}"
