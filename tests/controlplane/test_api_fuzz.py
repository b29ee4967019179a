"""The OpenAPI document and the server agree: schemathesis, driven by /v1/openapi.json as served,
sends valid and deliberately invalid requests to a control plane reading a real Slurm, with every
check on (no 5xx, status codes and response bodies as documented, invalid data refused, valid data
accepted, auth enforced), bounded so it takes seconds."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from sidecars.controlplane.openapi import document
from sidecars.devcluster import DevCluster
from sidecars.runtime.waits import within
from tests.controlplane.conftest import TOKEN, control_plane

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


@pytest.mark.timeout(180)
async def test_schemathesis_finds_no_mismatch_between_document_and_server(
    cluster: DevCluster, tmp_path: Path
) -> None:
    async with control_plane(cluster, max_wait_seconds=MAX_WAIT) as cp:
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
            f"Authorization: Bearer {TOKEN}",
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
    assert {200, 202, 204, 400, 401, 404, 422} <= set(statuses), statuses
    operations = {(op.upper(), path) for path, ops in served["paths"].items() for op in ops}
    assert len(sent) > 20 * len(operations), len(sent)
    reached = {m for m, _ in operations}
    assert {r["method"] for r in sent} >= reached
