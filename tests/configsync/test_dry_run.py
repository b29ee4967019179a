"""The dry run: a throwaway slurmctld of the cluster's own release tries every candidate first.

It catches what no check of ours knows (a set Slurm's client parse and our rules accept and that
kills slurmctld), it reaches no slurmd (shown against a control run without the isolation, which
ends a running job within a third of a second), and it leaves no process and no file behind on any
path, cancellation included.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import sys
from pathlib import Path

import pytest

from sidecars.configsync.dryrun import runner as runner_module
from sidecars.configsync.dryrun.runner import DryRunner
from sidecars.configsync.dryrun.sandbox import overrides
from sidecars.configsync.fileset import conffile
from sidecars.configsync.judge.validate import Validator
from sidecars.devcluster import DevCluster
from sidecars.slurm.runner import run
from sidecars.slurm.throwaway import free_port, helper_argv
from tests.configsync.harness import cluster_files, config_sync, read_set, set_sha

pytestmark = pytest.mark.cluster(
    nodes=2, foreground_ctld=True, extra_conf="PartitionName=p2 Nodes=n2 State=UP\nSlurmdDebug=debug2"
)

KILLER = b"Licenses=foo:abc\n"  # Slurm's client parse and our rules accept it; slurmctld does not


class Unisolated(DryRunner):
    """The control: node records left as they are, no namespace."""

    def isolate(self, text: str, dead_port: int) -> str:
        return text


class HostBound(DryRunner):
    """The control: the candidate's controller records left as they are."""

    def controller(self, text: str) -> str:
        return text

    def controller_host(self) -> str | None:
        return None


def runner(cluster: DevCluster, cls: type[DryRunner] = DryRunner, **kw: object) -> DryRunner:
    return cls(
        command=cluster.in_namespace("slurmctld"),
        work_dir=cluster.dir / "dry-run-work",
        target=cluster.conf_path.parent,
        **kw,  # type: ignore[arg-type]
    )


def without_p2(files: dict[str, bytes]) -> dict[str, bytes]:
    conf = files["slurm.conf"].replace(b"PartitionName=p2 Nodes=n2 State=UP", b"")
    return {**files, "slurm.conf": conf}


def scratch_processes(where: Path) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if str(where).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


async def gone(cluster: DevCluster, work: Path) -> None:
    """No dry-run process left: a process group killed with SIGKILL ends within moments, not at once
    (one seen still in /proc as the dry run returned, once in ~15 runs)."""
    await cluster._poll(
        cluster._async(lambda: scratch_processes(work)), lambda p: not p, 5, "no dry-run process"
    )


@pytest.mark.per_release("the throwaway is that release's slurmctld: its fatals are its own")
async def test_dry_run_catches_a_fatal_the_other_checks_accept(cluster: DevCluster) -> None:
    job = await cluster.sbatch("-p", "debug", wrap="sleep 600")
    await cluster.wait_job(job, "RUNNING")
    pid = cluster.foreground_pid()
    async with config_sync(cluster) as sync:
        good = sync.target_sha()
        files = {**sync.good(), "slurm.conf": sync.good()["slurm.conf"] + KILLER}
        # what the validation said before the dry run: fine
        plain = Validator(sync.service.client, sync.settings.target, sync.settings.state_dir)
        verdict = await plain.validate(read_set(files), read_set(sync.good()))
        assert verdict.ok and not verdict.restart, verdict.reason
        sync.config.write(files)
        st = await sync.wait(set_sha(files), key="rejected")
        reason = st["rejected"]["reason"]
        assert f"the dry run on Slurm {cluster.release.short} refused it" in reason
        assert "fatal: Invalid configured licenses: foo:abc" in reason  # in slurmctld's own words
        assert sync.target_sha() == good == st["applied"]["sha256"]
        assert st["dry_run"] == {"isolation": "netns", "release_mismatch": None}
        assert await sync.metric("slurm_sidecars_config_applies_total", result="rejected") == 1
        assert await sync.metric("slurm_sidecars_config_dry_run_seconds_count") >= 1
        assert not list((sync.settings.state_dir / "dry-run").iterdir())
    assert cluster.foreground_pid() == pid and cluster.foreground_exit is None
    # and a restart of the live one now reads the last known good set
    await cluster.stop_slurmctld(crash=True)
    await cluster.start_slurmctld()  # raises if it dies at start
    assert "foo" not in (await cluster.client().show_config()).get("Licenses", "")


@pytest.mark.parametrize("isolation", ["netns", "ports"])
@pytest.mark.per_release("each release's slurmctld checks its host name its own way")
async def test_the_dry_run_starts_on_a_host_that_slurmctldhost_does_not_name(
    cluster: DevCluster, isolation: str
) -> None:
    """config-sync may run where the hostname is not SlurmctldHost's (Compose gives each container
    its own): the throwaway is told this host is its only controller (no backup to reach either).
    The control, the records as written, is refused in slurmctld's words."""
    base = cluster_files(cluster)
    text = re.sub(
        rb"(?m)^SlurmctldHost=.*$",
        b"SlurmctldHost=ctld-elsewhere(127.0.0.1)\nSlurmctldHost=backup-elsewhere(127.0.0.1)",
        base["slurm.conf"],
    )
    assert text != base["slurm.conf"]
    files = read_set({**base, "slurm.conf": text})
    result = await runner(cluster, isolation=isolation).run(files, None)
    assert result.ok and result.isolation == isolation, result.reason
    control = await runner(cluster, HostBound, isolation=isolation, timeout=5.0).run(files, None)
    assert not control.ok
    assert "not a valid controller" in control.reason, control.reason  # slurmctld's own words


@pytest.mark.parametrize("isolation", ["netns", "ports"])
@pytest.mark.per_release("the ports and messages each release's slurmctld sends its nodes at start")
async def test_the_dry_run_reaches_no_slurmd(cluster: DevCluster, isolation: str) -> None:
    """A throwaway loading the state under a candidate without p2 fails the job running there and
    tells its node to end it at once: unisolated, the job dies (the control); isolated, the node's
    slurmd hears nothing and the job runs on."""
    job = await cluster.sbatch("-p", "p2", wrap="sleep 600")
    started = (await cluster.wait_job(job, "RUNNING")).start_time
    await cluster.job_state_saved(job)  # the throwaway loads only what was saved
    base = cluster_files(cluster)
    current = conffile.parse(read_set(base), "slurm.conf", cluster.conf_path.parent)
    slurmd_log = cluster.dir / "log" / "slurmd-n2.log"
    mark = slurmd_log.stat().st_size
    result = await runner(cluster, isolation=isolation, stay_seconds=1.0).run(
        read_set(without_p2(base)), current
    )
    assert result.ok and result.isolation == isolation, result.reason
    # "Invalid partition (p2) for JobId=N" (22.05, 24.11), "Killing JobId=N on defunct partition p2" (26.05)
    assert job in result.jobs and "partition" in result.jobs[job] and "p2" in result.jobs[job]
    await asyncio.sleep(1.0)  # what the throwaway sent would have landed by now (the control: ~10 ms)
    heard = slurmd_log.read_bytes()[mark:].decode("utf-8", "replace")
    assert "REQUEST_TERMINATE_JOB" not in heard and "_rpc_terminate_job" not in heard, heard[-2000:]
    assert (await cluster.wait_job(job, "RUNNING")).start_time == started
    assert (await cluster.client().node("n2")).state.base == "ALLOCATED"  # type: ignore[union-attr]
    # the control: the same throwaway without the isolation reaches n2's slurmd, which ends the job
    control = await runner(cluster, Unisolated, isolation="ports", stay_seconds=1.0).run(
        read_set(without_p2(base)), current
    )
    assert control.ok
    await cluster._poll(
        cluster._async(
            lambda: "REQUEST_TERMINATE_JOB" in slurmd_log.read_bytes()[mark:].decode("utf-8", "replace")
        ),
        bool,
        10,
        "the unisolated throwaway reaching slurmd",
    )


@pytest.mark.per_release("what each release's slurmctld leaves (sockets, state files) differs")
async def test_nothing_is_left_behind_on_any_path(cluster: DevCluster) -> None:
    base = cluster_files(cluster)
    current = conffile.parse(read_set(base), "slurm.conf", cluster.conf_path.parent)
    work = cluster.dir / "dry-run-work"
    good = runner(cluster)
    passed = await good.run(read_set(base), current)
    assert passed.ok and passed.seconds < 10
    assert not list(work.iterdir())
    await gone(cluster, work)
    refused = await good.run(read_set({**base, "slurm.conf": base["slurm.conf"] + KILLER}), current)
    assert not refused.ok and "Invalid configured licenses" in refused.reason
    assert not list(work.iterdir())
    await gone(cluster, work)
    # one that never becomes primary: given up after its time-out
    stuck = DryRunner(
        command=["sh", "-c", "sleep 60", "sh"],
        work_dir=work,
        target=cluster.conf_path.parent,
        timeout=1.0,
    )
    slow = await stuck.run(read_set(base), current)
    assert not slow.ok and "did not become the primary controller within 1s" in slow.reason
    assert not list(work.iterdir())
    await gone(cluster, work)
    # cancelled while its slurmctld runs
    task = asyncio.create_task(runner(cluster, stay_seconds=30.0).run(read_set(base), current))
    await cluster._poll(
        cluster._async(lambda: any(work.iterdir()) and bool(scratch_processes(work))),
        bool,
        10,
        "a dry run running",
    )
    await cluster._poll(
        cluster._async(lambda: any((d / "slurmctld.log").exists() for d in work.iterdir())),
        bool,
        10,
        "its log",
    )
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not list(work.iterdir())
    await cluster._poll(
        cluster._async(lambda: scratch_processes(work)), lambda p: not p, 5, "no dry-run process"
    )


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to drop to nobody")
async def test_an_unprivileged_sidecar_still_gets_a_network_namespace() -> None:
    """config-sync runs as the SlurmUser with every capability dropped: the helper then makes a user
    namespace that maps only that uid, which owns the network namespace (where the kernel allows it;
    otherwise `auto` falls back to the closed ports)."""
    argv = helper_argv(["sh", "-c", "id -u; cat /proc/net/if_inet6 /proc/net/fib_trie"], "netns")
    argv[0] = "/usr/bin/python3"  # the venv's interpreter lives under /root, which nobody may not enter
    result = await run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv], check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "65534"
    assert "127.0.0.2" in result.stdout  # the loopback's second address: our namespace, not the host's
    host = Path("/proc/net/fib_trie").read_text()
    assert "127.0.0.2" not in host


def test_an_auth_slurm_throwaway_serves_no_sack_socket_of_its_own() -> None:
    """It would unlink the live controller's /run/slurmctld/sack.socket and bind its own; killed, it
    leaves clients none (tests/configsync/test_configless_workers.py shows that end to end)."""
    conf = "AuthType=auth/slurm\nAuthInfo=cred_expire=30,use_client_ids\nCredType=cred/slurm\n"
    parsed = conffile.parse(read_set({"slurm.conf": conf.encode()}), "slurm.conf", Path("/etc/slurm"))
    lines = overrides(parsed, Path("/tmp/d"), Path("/tmp/s"), 1, 2).splitlines()
    assert [ln for ln in lines if ln.startswith("AuthInfo=")] == [
        "AuthInfo=cred_expire=30,use_client_ids,disable_sack"  # the candidate's options kept
    ]
    munge = conffile.parse(
        read_set({"slurm.conf": b"AuthType=auth/munge\n"}), "slurm.conf", Path("/etc/slurm")
    )
    assert "AuthInfo" not in overrides(munge, Path("/tmp/d"), Path("/tmp/s"), 1, 2)


async def test_the_helper_runs_under_a_config_sync_that_is_pid_1() -> None:
    """In a container config-sync is pid 1: its children's parent is 1 while it lives, and the helper
    must not take that for a parent already gone (every throwaway exited 1 at once, unsaid)."""
    code = (
        "import os, subprocess, sys\n"
        "from sidecars.slurm.throwaway import helper_argv\n"
        "assert os.getpid() == 1, os.getpid()\n"
        "r = subprocess.run(helper_argv(['echo', 'ran'], 'plain'), capture_output=True, text=True)\n"
        "print(r.returncode, r.stdout.strip(), r.stderr.strip())\n"
    )
    result = await run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code], check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:2] == ["0", "ran"], result.stdout


@pytest.mark.releases("slurm26")  # our choice of the port, not Slurm's: one release shows it
async def test_a_port_taken_before_the_throwaway_binds_it_is_no_verdict_on_the_set(
    cluster: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ports isolation: the port chosen free can be bound by another process before slurmctld binds
    it (CI saw one). The dry run tries again on another rather than refuse a good set for it."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        picked: list[int] = []

        def pick() -> int:  # the first choice is taken by the time slurmctld binds it
            picked.append(int(taken.getsockname()[1]) if not picked else free_port())
            return picked[-1]

        monkeypatch.setattr(runner_module, "free_port", pick)
        result = await runner(cluster, isolation="ports").run(read_set(cluster_files(cluster)), None)
    assert result.ok and result.isolation == "ports", result.reason
    assert len(picked) == 2 and picked[0] != picked[1], picked
