"""Which slurmctld is in control, with several: as the control plane's `/status` says (its own
count of takeovers), or straight from Slurm (a ping, and the candidates asked alone)."""

from __future__ import annotations

from typing import Any

from sidecars.operator.status.fetch import control_plane_client, get_json
from sidecars.operator.status.report import SourceError
from sidecars.operator.status.settings import StatusSettings
from sidecars.slurm import Controllers, SlurmClient, SlurmError


async def from_control_plane(settings: StatusSettings) -> dict[str, Any] | None:
    """`/status`'s `slurmctld` (None with one controller, or from a control plane without it)."""
    cp = control_plane_client(settings)
    base = cp.url
    async with cp.session() as session:
        body = await get_json(session, f"{base}/status", "control plane")
    found = body.get("controllers") if isinstance(body, dict) else None
    return found if isinstance(found, dict) else None


async def from_slurm(client: SlurmClient) -> dict[str, Any] | None:
    """Asked now (None with one controller): no takeovers are counted by a single look."""
    ctl = Controllers(client.env)
    if len(ctl.hosts()) < 2:
        return None
    try:
        await ctl.learn(await client.ping())
    except SlurmError as exc:
        raise SourceError(f"slurm: scontrol ping: {exc.message}") from None
    finally:
        ctl.close()
    return ctl.as_json()


def render(found: dict[str, Any]) -> list[str]:
    """The lines of the SLURMCTLD section."""
    primary = found.get("primary")
    head = f"{primary} in control" if primary else "none in control (a takeover in progress?)"
    lines = [f"{head} since {found.get('since') or '-'}"]
    for c in found.get("controllers") or []:
        lines.append(f"  {c.get('host')}: {c.get('role')}")
    last = found.get("last_takeover")
    if last:
        seen = found.get("takeovers", 0)
        lines.append(
            f"takeovers seen: {seen}; last: {last.get('from')} -> {last.get('to')} at {last.get('at')}"
        )
    return lines
