"""The OpenAPI document and the server agree: schemathesis, driven by /v1/openapi.json as served,
sends valid and deliberately invalid requests to a control plane reading a real Slurm, with every
check on (no 5xx, status codes and response bodies as documented, invalid data refused, valid data
accepted, auth enforced), bounded so it takes seconds. Once per identity: the operator, the
viewer, and a worker agent (its pod's ServiceAccount token, reviewed by the fake API server)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from sidecars.controlplane.http.openapi.document import document
from sidecars.devcluster import DevCluster
from sidecars.runtime.waits import within
from tests.controlplane.conftest import TOKEN, VIEWER, control_plane
from tests.fakekube import FakeKube

# the document and the server's checks are the same on every release (the Slurm reads under the
# API are tested per release elsewhere): the release our users run shows it
pytestmark = [pytest.mark.cluster(nodes=2), pytest.mark.releases("slurm26")]
SCHEMATHESIS = str(Path(sys.executable).parent / "schemathesis")
MAX_WAIT = 0.5  # long polls are real: a short cap keeps the fuzzer's valid waits short
EXAMPLES = 100  # per operation and phase: about 800 requests, seconds here, well under a minute loaded


def _requests(report: Path) -> list[dict[str, object]]:
    """Every request the run sent, with its answer's status, from the cassette it wrote."""
    import yaml

    cassette = yaml.safe_load(report.read_text())
    return [
        {
            "method": i["request"]["method"],
            "uri": i["request"]["uri"],
            "status": int(i["response"]["status"]["code"]),
        }
        for i in cassette["http_interactions"]
        if i.get("response")
    ]


# what each identity must meet at least: successes and refusals of every kind it can get
REACHED = {
    "operator": {200, 202, 204, 400, 401, 404, 422},
    "viewer": {200, 400, 401, 403, 404},
    # the fuzzer's node names are not its node: refused (what it may do is test_identities')
    "agent": {401, 403},
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("credential", ["operator", "viewer", "agent"])
async def test_schemathesis_finds_no_mismatch_between_document_and_server(
    cluster: DevCluster, tmp_path: Path, fake_kube: tuple[FakeKube, str], credential: str
) -> None:
    fake, url = fake_kube
    for node in cluster.node_names:
        fake.add_pod(f"worker-{node}", hostname=node)
    token = {"operator": TOKEN, "viewer": VIEWER}.get(credential) or fake.issue_token(
        f"worker-{cluster.node_names[0]}"
    )
    kube = url if credential == "agent" else None  # reviews need the API server; the rest runs without
    async with control_plane(cluster, kube_url=kube, max_wait_seconds=MAX_WAIT) as cp:
        status, served = await cp.get("/v1/openapi.json")
        assert status == 200 and served == json.loads(json.dumps(document(max_wait=MAX_WAIT)))
        cassette = tmp_path / "cassette.yaml"
        proc = await asyncio.create_subprocess_exec(
            SCHEMATHESIS,
            "run",
            f"{cp.url}/v1/openapi.json",
            "--checks",
            "all",
            "--mode",
            "all",
            "--header",
            f"Authorization: Bearer {token}",
            "--max-examples",
            str(EXAMPLES),
            "--phases",
            "examples,coverage,fuzzing",
            "--workers",
            "1",
            "--seed",
            os.environ.get("SIDECARS_FUZZ_SEED", "16"),
            "--generation-database",
            "none",
            "--request-timeout",
            "10",
            "--report",
            "vcr",
            "--report-vcr-path",
            str(cassette),
            "--no-color",
            cwd=tmp_path,  # no stray schemathesis.toml, no .hypothesis directory in the tree
            env={**os.environ, "COLUMNS": "200"},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await within(proc.communicate(), 150)
        text = out.decode(errors="replace")
        print(text)  # shown when the test fails, and by -rP
        assert proc.returncode == 0, text[-12000:]
    sent = _requests(cassette)
    # it reached past the door, on every operation: successes and refusals of every kind
    statuses = Counter(r["status"] for r in sent)
    assert REACHED[credential] <= set(statuses), statuses
    operations = {(op.upper(), path) for path, ops in served["paths"].items() for op in ops}
    assert len(sent) > 20 * len(operations), len(sent)
    reached = {m for m, _ in operations}
    assert {r["method"] for r in sent} >= reached
