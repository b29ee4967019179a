"""The fleet as the control plane serves it: `/v1/nodes`, `/v1/scale-in-order`, and the maintenance
windows and upgrade it plans (`/v1/maintenance`, `/v1/upgrade`)."""

from __future__ import annotations

from dataclasses import replace

import aiohttp

from sidecars.operator import maintenance, upgrade
from sidecars.operator.status.fetch import control_plane_client, get_json
from sidecars.operator.status.report import NodeRow, SourceError
from sidecars.operator.status.settings import StatusSettings
from sidecars.slurm.nodejson import NodeRecord, parse_node


def _row(node: NodeRecord) -> NodeRow:
    return NodeRow(
        name=node.name,
        state=node.state.base,
        flags=tuple(sorted(node.state.flags)),
        reason=node.reason,
        jobs=node.jobs or (),
        busy_until=node.busy_until,
    )


async def read_control_plane(
    settings: StatusSettings,
) -> tuple[list[NodeRow], list[str] | None, list[str], SourceError | None]:
    """The nodes, the scale-in order and the planned work; when only the order fails, the nodes read
    are kept and the order is None with its error (whatever could be read is still printed)."""
    cp = control_plane_client(settings)
    base = cp.url
    async with cp.session() as session:
        nodes = await get_json(session, f"{base}/v1/nodes", "control plane")
        try:
            if not isinstance(nodes, list):
                raise ValueError("expected a list of nodes")
            rows = [_row(parse_node(n)) for n in nodes]
        except ValueError as exc:
            raise SourceError(f"control plane: {base}/v1/nodes: unexpected answer: {exc}") from None
        since = await _reason_times(session, base)
        rows = [replace(r, reason_since=since.get(r.name)) for r in rows]
        planned = await _planned(session, base)
        try:
            order = await get_json(session, f"{base}/v1/scale-in-order", "control plane")
        except SourceError as exc:
            return rows, None, planned, exc
        if not isinstance(order, list) or not all(isinstance(n, str) for n in order):
            error = SourceError(f"control plane: {base}/v1/scale-in-order: expected a list of node names")
            return rows, None, planned, error
        return rows, order, planned, None


async def _planned(session: aiohttp.ClientSession, base: str) -> list[str]:
    """Maintenance windows and the upgrade, in the words of their own commands; a control plane
    without these endpoints (an older one) is not an error, only said so."""
    lines: list[str] = []
    try:
        windows = await get_json(session, f"{base}/v1/maintenance", "control plane")
        for window in windows["windows"]:
            lines += maintenance.render(window)
        rolling = await get_json(session, f"{base}/v1/upgrade", "control plane")
        if rolling.get("upgrade") or rolling.get("unavailable"):
            lines += upgrade.render(rolling)
    except (SourceError, KeyError, TypeError, AttributeError) as exc:
        lines.append(f"(unavailable: {exc})")
    return lines or ["none"]


async def _reason_times(session: aiohttp.ClientSession, base: str) -> dict[str, int]:
    """When each drain nobody owns was set (/v1/nodes does not say; the control plane's /status
    does, for those). An older control plane, or one that fails here, leaves the age unknown."""
    try:
        body = await get_json(session, f"{base}/status", "control plane")
        listed = body["unowned_drains"]["nodes"]
        return {str(u["node"]): int(u["since"]) for u in listed if isinstance(u.get("since"), int)}
    except (SourceError, KeyError, TypeError, AttributeError, ValueError):
        return {}
