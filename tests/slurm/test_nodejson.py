"""The control plane's node object is read by one parser, for the agent and for `status` alike."""

from __future__ import annotations

import pytest

from sidecars.slurm import NodeState
from sidecars.slurm.nodejson import parse_node


def test_slurms_own_plus_form_of_a_state_is_read_too() -> None:
    node = parse_node({"name": "n1", "state": "mixed+drain", "flags": ["COMPLETING"]})
    assert node.state == NodeState("MIXED", frozenset({"DRAIN", "COMPLETING"}))
    assert (node.jobs, node.busy_until, node.version, node.reason) == (None, None, None, None)


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"state": "IDLE"},
        {"name": ""},
        {"name": "n1", "flags": "DRAIN"},
        {"name": "n1", "jobs": ["seven"]},
        {"name": "n1", "busy_until": "soon"},
        {"name": "n1", "version": True},
    ],
    ids=["list", "no-name", "empty-name", "flags-text", "job-text", "busy-text", "version-bool"],
)
def test_what_is_not_a_node_object_is_refused_with_a_reason(bad: object) -> None:
    with pytest.raises(ValueError, match="node"):
        parse_node(bad)
