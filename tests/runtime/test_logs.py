"""One shape of log line: aiohttp's own records come out as the same JSON lines as ours, with the
context the daemon bound once."""

from __future__ import annotations

import json
import subprocess
import sys

# a daemon's HTTP face whose /status breaks: aiohttp itself logs the error, through the stdlib
CODE = """
import asyncio, aiohttp, structlog
from prometheus_client import CollectorRegistry
from sidecars.runtime import logs
from sidecars.runtime.http import DaemonHTTP, serve

def broken():
    raise RuntimeError("status broke")

async def main():
    logs.bind("worker", node="gpu-7", env={"POD_NAME": "w-0", "POD_NAMESPACE": "slurm"})
    structlog.get_logger("sidecars.test").info("worker_started", port=0)
    face = DaemonHTTP(CollectorRegistry(), status=broken)
    async with serve(face.app(), "127.0.0.1", 0) as port, aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{port}/status") as r:
            assert r.status == 500, r.status

logs.configure(json=True)
asyncio.run(main())
"""


def test_aiohttps_error_record_is_a_json_line_with_the_bound_context() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stderr.splitlines()]  # every line is JSON
    ours = next(e for e in lines if e["event"] == "worker_started")
    theirs = next(e for e in lines if e.get("logger") == "aiohttp.server")
    context = {"role": "worker", "node": "gpu-7", "pod": "slurm/w-0"}
    assert {k: ours[k] for k in context} == context
    assert {k: theirs[k] for k in context} == context
    assert theirs["event"].startswith("Error handling request") and theirs["level"] == "error"
    assert "RuntimeError: status broke" in theirs["exception"] and "Traceback" in theirs["exception"]
    assert theirs["timestamp"].endswith("Z")
