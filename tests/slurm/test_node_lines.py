"""The fleet's listing parses only the lines that changed since the last one, and a node that
changed is read as it is now: at 1,000 nodes config-sync reads the fleet twice a change."""

from __future__ import annotations

import pytest

from sidecars.devcluster import DevCluster
from sidecars.slurm.nodelines import NodeLines
from sidecars.slurm.textformat import nodes

pytestmark = pytest.mark.timeout(120)


@pytest.mark.cluster(nodes=2, node_records={"DOWN": 40, "FUTURE": 5})
async def test_unchanged_lines_are_not_parsed_again_and_a_changed_node_is_read_afresh(
    cluster: DevCluster,
) -> None:
    client = cluster.client()
    first = {n.name: n for n in await client.node_listing()}
    assert len(first) == 47
    await client.drain(["n1"], "node lines test")  # in effect when scontrol returns
    second = {n.name: n for n in await client.node_listing()}
    assert second.keys() == first.keys()
    records = [name for name in first if name not in ("n1", "n2")]
    # the records' lines did not change: the very nodes of the last listing, not parsed again
    assert all(second[name] is first[name] for name in records)
    assert "DRAIN" in second["n1"].state.flags and second["n1"].reason is not None
    assert second["n1"].reason.text == "node lines test" and "DRAIN" not in first["n1"].state.flags


def test_the_same_nodes_as_a_fresh_parse_whatever_the_last_listing_was() -> None:
    a = "NodeName=r1 State=DOWN+NOT_RESPONDING CPUTot=1 Reason=x [root@2026-12-02T00:00:00]\n"
    b = "NodeName=r2 State=IDLE CPUTot=2\n"
    c = "NodeName=r2 State=IDLE+DRAIN CPUTot=2 Reason=y [root@2026-12-02T00:00:01]\n"
    lines = NodeLines()
    for text in (a + b, a + b, a + c, "", a + "\n\nnot a node\nPartitionName=p Nodes=r1\n" + b, a + b + b):
        assert lines.parse(text) == nodes(text)
