"""The fleet's listing, each line parsed once: a line the last listing held is the node it was then.

config-sync reads the whole fleet before and after every change (1,003 nodes: 60-150 ms of parsing
each time under load), and nearly every line is the same in both: a node record's line only changes
when the node does. A line seen in the last listing gives its node without a parse; only the last
listing's lines are kept, so memory stays one listing whatever the fleet's history.
"""

from __future__ import annotations

from sidecars.slurm import textformat
from sidecars.slurm.models import Node


class NodeLines:
    """Parses `scontrol -o show node` output, reusing the nodes of the lines of the last one."""

    def __init__(self) -> None:
        self._last: dict[str, Node] = {}

    def parse(self, text: str) -> list[Node]:
        last = self._last
        seen: dict[str, Node] = {}
        out: list[Node] = []
        for line in text.splitlines():
            node = last.get(line) or seen.get(line)
            if node is None:
                if not line.strip() or "=" not in line:
                    continue
                p = textformat.pairs(line)
                if not p or p[0][0] != "NodeName":
                    continue
                node = textformat.node_from_pairs(p)
            seen[line] = node
            out.append(node)
        self._last = seen  # a Node is frozen: handing the same one out twice shares nothing mutable
        return out
