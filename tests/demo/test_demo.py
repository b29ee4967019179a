"""The demo is what a user runs first: the tour must reach its end on every release, and the live
mode must stop on Ctrl-C, SIGTERM or SIGHUP (a terminal that vanished) leaving nothing behind, and
leave nothing running when it is killed outright."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

import pytest

from sidecars.cli import self_argv
from sidecars.devcluster import Release
from sidecars.runtime.pdeathsig import die_with_parent
from sidecars.runtime.waits import within
from sidecars.slurm import naming
from tests.demo.tours import demo_argv, tour
from tests.devcluster import lifetime


def _mentions(pid: str, text: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return text in f.read()
    except OSError:
        return False


@pytest.mark.timeout(240)
@pytest.mark.per_release("the tour a user runs first must reach its end on each release's Slurm")
async def test_tour_runs_to_the_end(release: Release) -> None:
    text, summary = await tour(release, seconds=200)
    assert summary.count("\n  ok ") == 9 and "FAIL" not in summary, summary
    assert re.search(r"rejected: .*ThisIsNotAKey", text), text[-3000:]
    # a window made ahead of time: Slurm's MAINT reservation, the job waited for, the node released
    window = text[text.index("] A maintenance window") : text.index("] A drain nobody owns")]
    assert re.search(r"reservation slurm-sidecars-maint-tour\S* \(MAINT\) ahead of time", window), window
    assert re.search(r"waiting for job \d+ \(ends \d\d:\d\d\)", window), window
    assert re.search(r"job \d+ COMPLETED \(not killed\)", window) and "n3 works again" in window, window
    # a drain Slurm set itself, found and classed, then lifted by hand
    unowned = text[text.index("] A drain nobody owns") : text.index("] A paced upgrade")]
    assert "Slurm drained n3 itself ('Prolog error" in unowned and "as class prolog" in unowned, unowned
    # the paced roll: one worker at a time, a job waited for, each slurmd replaced; what the control
    # plane's own roll would need, said
    roll = text[text.index("] A paced upgrade") : text.index("] A worker scaled in")]
    assert re.search(r"n\d: drained, waiting for job \d+", roll), roll
    assert len(re.findall(r"n\d: slurmd replaced \(pid \d+ -> \d+\), registered again, undrained", roll)) == 3
    assert "through the Kubernetes API" in roll and "--kubeconfig" in roll, roll
    assert re.search(r"ok   A paced upgrade: rolled n\d > n\d > n\d one at a time \(budget 1\)", summary)
    # the metrics name Slurm's commands, whatever ran them (no interpreter, no Debian binary name)
    commands = set(re.findall(r'slurm_commands_total\{command="([^"]+)"', text))
    assert commands and commands <= naming.labels(), commands - naming.labels()
    # the operator's page: its address and where its viewer token is
    assert re.search(r"web page: +http://127\.0\.0\.1:\d+/ui/ \(viewer token in \S+viewer-token\)", text), (
        text
    )
    cluster_dir = re.search(r"is running in (\S+)\.", text)
    assert cluster_dir is not None and not os.path.exists(cluster_dir[1])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
async def test_live_mode_stops_on_signal_and_leaves_nothing(sig: signal.Signals) -> None:
    if os.environ.get("SIDECARS_NO_SLURM") == "1":
        pytest.skip("needs the host's Slurm")
    proc = await asyncio.create_subprocess_exec(
        *self_argv("demo"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=die_with_parent(),
    )
    assert proc.stdout is not None
    seen = b""
    try:
        while b"Ctrl-C stops it" not in seen:
            line = await within(proc.stdout.readline(), 90)
            assert line, f"demo exited early: {seen.decode()[-2000:]}"
            seen += line
        table = await within(proc.stdout.readuntil(b"n3"), 30)  # the live table shows the nodes
        assert b"n1" in table
        proc.send_signal(sig)
        assert await within(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    cluster_dir = re.search(rb"is running in (\S+)\.", seen)
    assert cluster_dir is not None
    assert not os.path.exists(cluster_dir[1])
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _mentions(p, cluster_dir[1])]


@pytest.mark.timeout(240)
@pytest.mark.releases("slurm24")  # the demo's own; test_killed_owner.py kills owners on host and chroot
async def test_killed_demo_leaves_nothing_running(release: Release) -> None:
    proc = await asyncio.create_subprocess_exec(
        *demo_argv(release),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        preexec_fn=die_with_parent(),
    )
    assert proc.stdout is not None
    seen, cluster_dir, watched = b"", None, None
    try:
        while b"Ctrl-C stops it" not in seen:
            line = await within(proc.stdout.readline(), 150)
            assert line, f"demo exited early: {seen.decode()[-2000:]}"
            seen += line
            if found := re.search(rb"is running in (\S+)\.", line):
                cluster_dir = found[1].decode()
        assert cluster_dir is not None, seen.decode()
        # a job, so that slurmstepd and the job's own processes are there to outlive the demo
        sbatch = await asyncio.create_subprocess_exec(
            f"{cluster_dir}/bin/sbatch",
            f"--chdir={cluster_dir}/out",
            f"--output={cluster_dir}/out/held-%j.out",
            "--wrap",
            "sleep 600",
            env={**os.environ, "SLURM_CONF": f"{cluster_dir}/etc/slurm.conf"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await sbatch.communicate()
        assert sbatch.returncode == 0, out
        init = int(Path(cluster_dir, "run", "init.pid").read_text())
        watched = await lifetime.Watched.capture(proc.pid, init, cluster_dir)
        assert watched.names() >= lifetime.CLUSTER_NAMES, watched.procs
        roles = " ".join(watched.cmdlines.values())
        for role in ("config-sync", "control-plane", "worker --node-name n1", "worker --node-name n3"):
            assert f"sidecars --log-format json {role}" in roles, roles
        proc.kill()
        await proc.wait()
        left = await watched.wait_gone(lifetime.FEW_SECONDS)
        assert not left, f"still running after the demo was killed: {left}"
    finally:
        await lifetime.clean_up(proc, watched, cluster_dir, release)
