"""The fleet as the control plane serves it: `/v1/nodes` and `/v1/scale-in-order`."""

from __future__ import annotations

import aiohttp

from sidecars.slurm.nodejson import NodeRecord, parse_node
from sidecars.status.fetch import get_json
from sidecars.status.report import NodeRow, SourceError
from sidecars.status.settings import StatusSettings


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
) -> tuple[list[NodeRow], list[str] | None, SourceError | None]:
    """The nodes and the scale-in order; when only the order fails, the nodes read are kept and the
    order is None with its error (whatever could be read is still printed)."""
    assert settings.control_plane is not None
    headers = {"Authorization": f"Bearer {settings.token}"}
    timeout = aiohttp.ClientTimeout(total=settings.timeout)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        base = settings.control_plane
        nodes = await get_json(session, f"{base}/v1/nodes", "control plane", headers)
        try:
            if not isinstance(nodes, list):
                raise ValueError("expected a list of nodes")
            rows = [_row(parse_node(n)) for n in nodes]
        except ValueError as exc:
            raise SourceError(f"control plane: {base}/v1/nodes: unexpected answer: {exc}") from None
        try:
            order = await get_json(session, f"{base}/v1/scale-in-order", "control plane", headers)
        except SourceError as exc:
            return rows, None, exc
        if not isinstance(order, list) or not all(isinstance(n, str) for n in order):
            error = SourceError(f"control plane: {base}/v1/scale-in-order: expected a list of node names")
            return rows, None, error
        return rows, order, None
