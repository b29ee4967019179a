"""The `worker` and `drain-hook` commands as the kubelet runs them: real processes, real exit codes."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import pytest

from sidecars.cli import self_argv
from sidecars.devcluster import DevCluster, free_port
from sidecars.runtime.waits import within
from tests.helpers import worker_args


async def run(*argv: str, env: dict[str, str] | None = None, seconds: float = 60) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *self_argv(*argv),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    try:
        out, _ = await within(proc.communicate(), seconds)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode or 0, out.decode()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["worker", "--node-name", "n1", "--http", "nope", "--socket", "/tmp/x.sock"], "HOST:PORT"),
        (
            ["worker", "--node-name", "n[1-2]", "--http", "127.0.0.1:0", "--socket", "/tmp/x.sock"],
            "node name",
        ),
        (
            ["worker", "--node-name", "n1", "--http", "127.0.0.1:0", "--socket", "/nonexistent/dir/a.sock"],
            "does not exist",
        ),
        (
            worker_args(
                "n1",
                0,
                Path("/tmp/x.sock"),
                "--control-plane",
                "http://cp:8080",
                "--token-file",
                "/nonexistent",
            ),
            "--token-file",
        ),
        (worker_args("n1", 0, Path("/tmp/x.sock"), "--poll-seconds", "0"), "--poll-seconds"),
        (["drain-hook", "--socket", "/tmp/x.sock", "--timeout-seconds", "soon"], "--timeout-seconds"),
        (
            ["worker", "--node-name-from", "kube-node", "--http", "127.0.0.1:0", "--socket", "/tmp/x.sock"],
            "needs --kube-node-name",
        ),
        (
            [
                "worker",
                *("--node-name-from", "kube-node", "--kube-node-name", "k1", "--node-name", "n1"),
                *("--http", "127.0.0.1:0", "--socket", "/tmp/x.sock"),
            ],
            "give one, not both",
        ),
        (["worker", "--http", "127.0.0.1:0", "--socket", "/tmp/x.sock"], "--node-name"),
        (
            [
                *("probe", "controller", "--url", "http://127.0.0.1:1"),
                *("--slurm-token-file", "/x", "--jwt-key-file", "/y"),
            ],
            "--slurm-token-file and --jwt-key-file: give one, not both",
        ),
    ],
)
async def test_bad_invocations_exit_2_with_a_reason(argv: list[str], says: str) -> None:
    code, out = await run(*argv)
    assert code == 2, out
    assert says in out


async def test_hook_with_no_agent_gives_up_with_exit_1(sockdir: Path) -> None:
    code, out = await run("drain-hook", "--socket", str(sockdir / "none.sock"), "--timeout-seconds", "0.6")
    assert code == 1, out
    assert "gave up after 0.6s" in out


# the processes' wiring (flags, socket, exit codes) is ours; a drain is tested on every release in
# test_drain.py
@pytest.mark.releases("slurm22")
@pytest.mark.cluster(nodes=1)
async def test_worker_and_hook_processes_drain_an_idle_node(cluster: DevCluster, sockdir: Path) -> None:
    port = free_port()
    env = {**cluster.env, "POD_NAME": "worker-0", "POD_NAMESPACE": "hpc"}
    sock = sockdir / "agent.sock"
    worker = await asyncio.create_subprocess_exec(
        *self_argv("--log-format", "json", *worker_args("n1", port, sock, "--poll-seconds", "0.5")),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            code, out = await run("probe", "readyz", "--url", url, "--timeout-seconds", "1")
            if code == 0:
                break
            await asyncio.sleep(0.1)
        assert code == 0, out
        code, out = await run(
            "drain-hook", "--socket", str(sock), "--timeout-seconds", "30", "--reason", "test", env=env
        )
        assert code == 0, out
        node = await cluster.client().node("n1")
        assert node is not None and node.state.drained
        assert (
            node.reason is not None
            and node.reason.text == "slurm-sidecars: pod hpc/worker-0 terminating: test"
        )
        worker.send_signal(signal.SIGTERM)
        assert await within(worker.wait(), 10) == 0
    finally:
        if worker.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                worker.kill()
            await worker.wait()
    assert not sock.exists()  # the agent removed its socket on the way out
