"""Drains nobody owns, found on real Slurm: a prolog that fails (Slurm drains the node itself), a
slurmd that stops (Slurm sets it DOWN, "Not responding"), and an admin's own `scontrol` drain
(`unknown`: listed, never ours). Ours is never listed. Each shows in the control plane's /status
with its class and age, in the metric by class, and in `slurm-sidecars status`.

(24.11's UNDRAIN leaves the reason on the node, and Slurm's "Not responding" never replaces a reason
already there: the node that stops is one nobody drained before.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import TOKEN, control_plane
from tests.helpers import eventually
from tests.status.invocation import status as run_status

# the prolog fails on every node, so only the job the test pins to n1 meets it
pytestmark = pytest.mark.cluster(nodes=4, extra_conf="Prolog=/bin/false\n", slurmd_timeout=5)


def listed(status: dict[str, object]) -> dict[str, dict[str, object]]:
    body = status["unowned_drains"]
    assert isinstance(body, dict)
    return {str(u["node"]): u for u in body["nodes"]}


@pytest.mark.per_release("each release's own drain reasons (prolog failure, not responding)")
async def test_slurms_own_drains_and_an_admins_are_found_with_their_class_and_age(
    cluster: DevCluster, tmp_path: Path
) -> None:
    client = cluster.client()
    async with control_plane(cluster) as cp:
        before = time.time()
        await cluster.sbatch("-w", "n1", wrap="true")  # its prolog fails: Slurm drains n1
        await client.drain(["n2"], "bad fan, ticket 12")  # an admin's, not through our API
        assert (await cp.post("/v1/nodes/n3/drain", {"reason": "slurm-sidecars: swap"}))[0] == 202

        async def status() -> dict[str, object]:
            code, body = await cp.get("/status")
            assert code == 200
            return dict(body)

        found = listed(
            await eventually(
                status,
                lambda s: {"n1", "n2"} <= set(listed(s)),
                what="n1 and n2 listed as unowned",
                within=60,
            )
        )
        assert found["n1"]["class"] == "prolog" and str(found["n1"]["reason"]).startswith("Prolog error")
        assert found["n2"]["class"] == "unknown" and found["n2"]["reason"] == "bad fan, ticket 12"
        for node in ("n1", "n2"):
            since = found[node]["since"]
            assert isinstance(since, int) and before - 5 <= since <= time.time() + 5, (node, since)
        # ours, even once Slurm shows it, is never listed
        await eventually(
            lambda: cp.get("/v1/nodes/n3"), lambda r: "DRAIN" in r[1]["flags"], what="n3 drained"
        )
        assert "n3" not in listed(await status())

        await eventually(
            lambda: (
                cp.sample("slurm_sidecars_unowned_drains", **{"class": "prolog"}),
                cp.sample("slurm_sidecars_unowned_drains", **{"class": "unknown"}),
            ),
            lambda counts: counts == (1, 1),
            what="the metric by class",
        )

        # a slurmd that stops: Slurm marks its node DOWN, "Not responding", after SlurmdTimeout
        await cluster.kill_slurmd("n4")
        found = listed(
            await eventually(
                status,
                lambda s: listed(s).get("n4", {}).get("class") == "not_responding",
                what="n4 not responding",
                within=90,
            )
        )
        assert found["n4"]["reason"] == "Not responding"

        # `slurm-sidecars status`, straight from Slurm and through the control plane: the same
        # nodes, classes, and an age for each
        token = tmp_path / "token"
        token.write_text(TOKEN)
        for args in ([], ["--control-plane", cp.url, "--token-file", str(token)]):
            r = await run_status(*args, env=cluster.env)
            assert r.code == 0, r.err
            lines = r.out.splitlines()
            head = next(i for i, line in enumerate(lines) if line.startswith("DRAINS NOBODY OWNS"))
            rows = {line.split()[0]: line.split() for line in lines[head + 2 : lines.index("", head)]}
            assert set(rows) == {"n1", "n2", "n4"}, (args, lines[head:])
            assert [rows[n][2] for n in ("n1", "n2", "n4")] == ["prolog", "unknown", "not_responding"]
            assert all(rows[n][3] != "-" for n in rows), (args, rows)
