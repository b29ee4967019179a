"""Slurm's loaded topology as the tests read it back (the topology tests of the client, the agent
and the control plane)."""

from __future__ import annotations

from sidecars.slurm import SlurmClient


async def switches(client: SlurmClient) -> dict[str, str]:
    """`scontrol show topology` (tree) -> switch name -> its Nodes= (a hostlist, "" when none)."""
    out = (await client.run("scontrol", "show", "topology")).stdout
    found = {}
    for line in out.splitlines():
        words = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if "SwitchName" in words:
            found[words["SwitchName"]] = words.get("Nodes", "")
    return found
