"""What every role shares: flags from the environment, the HTTP face, exit codes and signals."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter

from sidecars.cli import main as cli_main
from sidecars.cli import self_argv
from sidecars.runtime import process
from sidecars.runtime.checks import CheckResult, Checks
from sidecars.runtime.daemon import run_until_signalled
from sidecars.runtime.http import DaemonHTTP, serve
from sidecars.runtime.settings import (
    ADDRESS,
    ConfigError,
    add_flags,
    declared,
    parse_addr,
    setting,
    settings_from,
)
from sidecars.runtime.waits import within


@declared()
class _Sample:
    node_name: str = setting(required=True, help="a required flag")
    source: tuple[str, ...] = setting(default=(), multiple=True, help="a repeatable flag")
    http_address: tuple[str, int] = setting(default=("127.0.0.1", 0), flag="--http", conv=ADDRESS, help="x")


def test_every_flag_can_come_from_the_environment() -> None:
    p = argparse.ArgumentParser()
    env = {"SIDECARS_NODE_NAME": "gpu-7", "SIDECARS_SOURCE": "/a,/b", "SIDECARS_HTTP": "0.0.0.0:9100"}
    add_flags(p, _Sample, env=env)
    assert settings_from(_Sample, p.parse_args([])) == _Sample("gpu-7", ("/a", "/b"), ("0.0.0.0", 9100))
    given = settings_from(_Sample, p.parse_args(["--node-name", "x", "--source", "/c", "--source", "/d"]))
    assert (given.node_name, given.source) == ("x", ("/c", "/d"))  # a flag beats the environment


@pytest.mark.parametrize("bad", ["9100", "host:", "host:99999", ":x"])
def test_bad_addresses_are_config_errors(bad: str) -> None:
    with pytest.raises(ConfigError, match="HOST:PORT"):
        parse_addr(bad)


def test_good_addresses() -> None:
    assert parse_addr("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_addr(":9100") == ("0.0.0.0", 9100)
    assert parse_addr("[::1]:80") == ("::1", 80)


async def test_probe_endpoints_name_each_check() -> None:
    registry = CollectorRegistry()
    Counter("slurm_sidecars_things", "things", registry=registry).inc()
    ready = Checks(timeout=0.2)
    ready.add("registered", lambda: CheckResult(True, "n1 registered"))

    async def hangs() -> CheckResult:
        await asyncio.sleep(10)
        return CheckResult(True)

    ready.add("slow", hangs)
    live = Checks()
    live.add("loop", lambda: CheckResult(True, "fresh"))
    face = DaemonHTTP(registry, liveness=live, readiness=ready, status=lambda: {"generation": 3})
    async with serve(face.app(), "127.0.0.1", 0) as port, aiohttp.ClientSession() as s:
        base = f"http://127.0.0.1:{port}"
        async with s.get(f"{base}/livez") as r:
            assert r.status == 200 and (await r.json())["checks"]["loop"] == {"ok": True, "detail": "fresh"}
        async with s.get(f"{base}/readyz") as r:
            body = await r.json()
            assert r.status == 503 and not body["ok"]
            assert body["checks"]["registered"]["ok"] and "within" in body["checks"]["slow"]["detail"]
        async with s.get(f"{base}/metrics") as r:
            assert "slurm_sidecars_things_total 1.0" in await r.text()
        async with s.get(f"{base}/status") as r:
            assert await r.json() == {"generation": 3}


def test_unbuilt_roles_and_bad_invocations_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["probe", "livez", "--url", "not-a-url"]) == 2
    assert "--url must be an http(s) URL" in capsys.readouterr().err
    assert cli_main(["no-such-role"]) == 2
    assert cli_main([]) == 2
    assert cli_main(["demo", "--nodes", "many"]) == 2
    assert cli_main(["demo", "--nodes", "1"]) == 2


async def test_probe_command_exit_codes() -> None:
    ready = Checks()
    ready.add("registered", lambda: CheckResult(False, "node n1 is FUTURE"))
    face = DaemonHTTP(CollectorRegistry(), readiness=ready)
    async with serve(face.app(), "127.0.0.1", 0) as port:
        url = f"http://127.0.0.1:{port}"
        for which, want in (("livez", 0), ("readyz", 1)):
            proc = await asyncio.create_subprocess_exec(
                *self_argv("probe", which, "--url", url),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            _, err = await proc.communicate()
            assert proc.returncode == want, err
        assert b"node n1 is FUTURE" in err
    proc = await asyncio.create_subprocess_exec(
        *self_argv("probe", "livez", "--url", "http://127.0.0.1:1"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 1 and b"unreachable" in err


DAEMON = """
import asyncio, sys
from sidecars.runtime.daemon import run

async def main(stop):
    print("up", flush=True)
    await stop.wait()
    print("stopped cleanly", flush=True)

sys.exit(run(main))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
async def test_every_stop_signal_stops_a_daemon_cleanly_with_exit_0(sig: signal.Signals) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", DAEMON, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    assert proc.stdout is not None
    try:
        assert await within(proc.stdout.readline(), 30) == b"up\n"
        proc.send_signal(sig)
        out, _ = await within(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert (proc.returncode, out) == (0, b"stopped cleanly\n")


async def test_a_daemon_runner_cancelled_itself_leaves_its_main_not_running() -> None:
    # a caller that stops the runner (a test's teardown, an embedding program) must not leave the
    # role's main running behind it: cancelled in its grace or before, main is cancelled too
    started, ended = asyncio.Event(), asyncio.Event()

    async def main(stop: asyncio.Event) -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # a main that never returns on its own
        finally:
            ended.set()

    runner = asyncio.create_task(run_until_signalled(main, grace_seconds=3600))
    await within(started.wait(), 30)
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    assert ended.is_set()


CHILDREN = """
import asyncio, sys, threading
from sidecars.runtime import process
from sidecars.runtime.daemon import run

async def main(stop):
    child = await process.start(["cat"], stdin=asyncio.subprocess.PIPE)
    waiting = [t.name for t in threading.enumerate() if "waitpid" in t.name]
    print("threads", waiting, "reaped", await child.kill(), flush=True)

sys.exit(run(main))
"""


@pytest.mark.skipif(sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"), reason="3.11 with pidfds")
async def test_a_daemon_waits_for_its_children_without_a_thread_each() -> None:
    # 3.11's default watcher starts a thread per child and the loop waits for it to run: a stall of
    # 0.1-0.3 s at every Slurm command on a loaded machine; a daemon watches children by pidfd
    # no timeout of its own: the daemon ends when its main returns (the suite bounds every test)
    done = await process.run([sys.executable, "-c", CHILDREN], timeout=None, merge_stderr=True)
    assert (done.returncode, done.stdout) == (0, b"threads [] reaped -9\n"), done.stdout
