"""A foreground controller (`slurmctld -D`, as our images run it): a child the cluster holds, whose
PID, stops, starts and end are the cluster's to see, and which leaves nothing behind.

Measured here: a valid `scontrol reconfigure` keeps the PID on both releases, but not for the same
reason. 22.05 reconfigures inside the running process; 24.11 re-executes itself in place (no fork):
the same PID and start time, a fresh "started on cluster" line and a new slurmscriptd child.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from sidecars.devcluster import ClusterError, DevCluster
from sidecars.slurm import SlurmClient

pytestmark = [
    pytest.mark.cluster(nodes=1, foreground_ctld=True),
    pytest.mark.per_release(
        "the cluster runs each release's slurmctld -D: its pid over a reconfigure"
        " (re-exec on 23.11+), its stops, deaths and fatals are each release's"
    ),
]


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def started_lines(cluster: DevCluster) -> int:
    return cluster.ctld_stderr.read_text().count(" started on cluster ")


async def test_foreground_controller_is_our_child_and_runs_jobs(cluster: DevCluster) -> None:
    pid = cluster.foreground_pid()
    assert pid is not None and cluster.hostpid("slurmctld") == pid  # its pid file names our child
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert argv[:2] == [b"slurmctld", b"-D"]
    assert pid in cluster.processes()  # inside the cluster's PID namespace
    assert (await cluster.client().ping()).up
    job = await cluster.sbatch(wrap="true")
    await cluster.wait_job(job, "COMPLETED")
    assert "Running as primary controller" in cluster.ctld_stderr.read_text()  # -D logs to stderr too


async def test_valid_reconfigure_keeps_the_process(cluster: DevCluster) -> None:
    pid = cluster.foreground_pid()
    assert pid is not None
    born, (scriptd,) = start_time(pid), children(pid)
    assert started_lines(cluster) == 1
    cluster.conf_path.write_text(cluster.conf_path.read_text().replace("MaxTime=INFINITE", "MaxTime=60"))
    await cluster.client().reconfigure()
    parts = await cluster.client(timeout=5.0).partitions()
    assert parts[0].max_time_minutes == 60
    assert cluster.foreground_pid() == cluster.hostpid("slurmctld") == pid
    assert start_time(pid) == born and cluster.foreground_exit is None  # never forked, never exited
    if cluster.release.short == "22.05":  # reconfigured inside the running process
        assert children(pid) == [scriptd] and started_lines(cluster) == 1
    else:  # exec'd in place: a fresh start in the same process, with a new slurmscriptd
        await cluster._poll(cluster._async(lambda: children(pid)), lambda k: k not in ([], [scriptd]), 5, "")
        assert started_lines(cluster) == 2


async def test_stop_start_restart_and_crash(cluster: DevCluster) -> None:
    job = await cluster.sbatch(wrap="sleep 600")
    await cluster.wait_job(job, "RUNNING")
    first = cluster.foreground_pid()
    await cluster.restart_slurmctld()
    second = cluster.foreground_pid()
    assert second not in (None, first) and cluster.hostpid("slurmctld") == second
    assert cluster.foreground_exit is None
    await cluster.stop_slurmctld()
    assert cluster.foreground_exit == 0 and cluster.hostpid("slurmctld") is None
    await cluster.start_slurmctld()
    await cluster.stop_slurmctld(crash=True)
    assert cluster.foreground_exit == -9 and cluster.foreground_pid() is None
    await cluster.start_slurmctld()
    assert cluster.hostpid("slurmctld") == cluster.foreground_pid() is not None
    await cluster.wait_job(job, "RUNNING")  # recovered from the saved state each time


async def test_a_controller_that_dies_is_seen_and_a_bad_start_fails_fast(cluster: DevCluster) -> None:
    good = cluster.conf_path.read_text()
    cluster.conf_path.write_text(good + "ThisIsNotAKey=1\n")
    with pytest.raises(ClusterError, match="the foreground slurmctld is still running"):
        await cluster.start_slurmctld()
    pid = cluster.foreground_pid()
    assert pid is not None
    # SIGHUP makes slurmctld re-read its own file, as a reconfigure would (its client refuses to send one)
    os.kill(pid, signal.SIGHUP)
    await cluster._poll(
        cluster._async(lambda: cluster.foreground_exit), lambda rc: rc is not None, 10, "slurmctld exit"
    )
    assert cluster.foreground_exit == 1 and cluster.hostpid("slurmctld") is None
    assert "Parsing error at unrecognized key: ThisIsNotAKey" in cluster.ctld_stderr_tail()
    with pytest.raises(ClusterError, match=r"(?s)exited with 1 at start: .*ThisIsNotAKey"):
        await cluster.start_slurmctld(timeout=10)
    cluster.conf_path.write_text(good)
    await cluster.start_slurmctld()
    assert (await cluster.client().ping()).up


@pytest.mark.releases("slurm22")
async def test_a_shutdown_request_that_is_not_acted_on_ends_in_sigterm(
    cluster: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def taken_but_ignored(self: SlurmClient) -> None:
        return None

    monkeypatch.setattr(SlurmClient, "shutdown_controller", taken_but_ignored)
    await cluster.stop_slurmctld(timeout=6)
    assert cluster.foreground_exit == 0  # SIGTERM: the controller's own graceful shutdown
