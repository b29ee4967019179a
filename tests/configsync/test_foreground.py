"""config-sync beside a foreground slurmctld (`slurmctld -D`, as our images run it).

In the foreground a reconfigure cannot fall back on a parent process: 22.05 reconfigures in process
and 24.11 re-executes itself in place, so a file slurmctld cannot start on kills it. Some such files
pass our validation (Slurm's client parse never loads plugins nor reads the state directory), and
`scontrol reconfigure` still answers rc 0 on 24.11. Then the verification must see the controller
gone, the files must go back to the last known good set, and the restart the kubelet then does
must come up on that set.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from sidecars.configsync.apply.applier import Applier
from sidecars.configsync.apply.views import view
from sidecars.configsync.fileset import conffile
from sidecars.devcluster import DevCluster
from sidecars.runtime.waits import within
from tests.configsync.harness import (
    bump_max_job_count,
    cluster_files,
    config_sync,
    container_restarts,
    parser_only,
    read_set,
    set_sha,
)

pytestmark = pytest.mark.cluster(nodes=1, foreground_ctld=True)


def edit(files: dict[str, bytes], old: bytes, new: bytes) -> dict[str, bytes]:
    assert re.search(old, files["slurm.conf"])
    return {**files, "slurm.conf": re.sub(old, new, files["slurm.conf"])}


@pytest.mark.per_release("23.11+ re-execs slurmctld -D on reconfigure; 22.05 rereads in place")
async def test_valid_change_applies_in_the_same_process(cluster: DevCluster) -> None:
    job = await cluster.sbatch(wrap="sleep 600")
    await cluster.wait_job(job, "RUNNING")
    pid = cluster.foreground_pid()
    async with config_sync(cluster) as sync:
        files = edit(sync.good(), rb"MaxTime=INFINITE", b"MaxTime=45")
        sync.config.write(files)
        st = await sync.wait(set_sha(files))
        assert st["applied"]["generation"] == 2 and st["rejected"] is None
        assert sync.target_sha() == set_sha(files)
        assert (await cluster.client().partitions())[0].max_time_minutes == 45
    # the same process throughout (24.11 exec'd itself in place), still our child
    assert cluster.foreground_pid() == cluster.hostpid("slurmctld") == pid
    assert cluster.foreground_exit is None
    await cluster.wait_job(job, "RUNNING")


async def test_invalid_change_never_reaches_the_controller(cluster: DevCluster) -> None:
    pid = cluster.foreground_pid()
    async with config_sync(cluster) as sync:
        good = sync.target_sha()
        # Slurm's client parse accepts this one; slurmctld dies of it
        files = {**sync.good(), "slurm.conf": sync.good()["slurm.conf"] + b"PartitionName=p2 Nodes=n9\n"}
        sync.config.write(files)
        st = await sync.wait(set_sha(files), key="rejected")
        assert "partition p2 names unknown node(s) n9" in st["rejected"]["reason"]
        assert sync.target_sha() == good == st["applied"]["sha256"]
        assert await sync.metric("slurm_sidecars_config_applies_total", result="rejected") == 1
        assert (await cluster.client().ping()).up
    assert cluster.foreground_pid() == pid and cluster.foreground_exit is None


@pytest.mark.per_release("what kills slurmctld, and when (reconfigure or restart), is each release's")
async def test_change_that_kills_slurmctld_is_rolled_back_and_it_restarts_on_the_good_set(
    cluster: DevCluster,
) -> None:
    job = await cluster.sbatch(wrap="sleep 600")
    started = (await cluster.wait_job(job, "RUNNING")).start_time
    preempt = (await cluster.client().show_config())["PreemptType"]
    # a killer our validation does not know, modelled by Slurm's client parse alone: it loads no
    # plugin, so a misspelt one passes (our full validation refuses this one: test_plugin_names.py)
    async with config_sync(cluster, validator_factory=parser_only) as sync:
        good = sync.target_sha()
        files = edit(sync.good(), rb"MaxTime=INFINITE", b"MaxTime=45")
        files["slurm.conf"] += b"PreemptType=preempt/qos_typo\n"
        verdict = await sync.service.validator.validate(read_set(files), read_set(sync.good()))
        assert verdict.ok and not verdict.restart
        sync.config.write(files)
        st = await sync.wait(set_sha(files), key="rejected")  # seen within seconds, not scontrol's ~9 s x 2
        assert sync.target_sha() == good == st["applied"]["sha256"]
        assert await sync.metric("slurm_sidecars_config_applies_total", result="rolled_back") == 1
        assert any(r == "ConfigRolledBack" for r, _, _ in sync.events.events)
        reason = st["rejected"]["reason"]
        # in slurmctld's words, from its log
        assert "fatal: failed to initialize preempt plugin" in reason
        if cluster.release.short == "22.05":  # it died answering: scontrol saw the connection drop
            assert "Zero Bytes were transmitted" in reason
        else:  # `scontrol reconfigure` said rc 0 with no output: only the verification saw it die
            assert reason.startswith("slurmctld stopped answering after the change")
        await cluster._poll(
            cluster._async(lambda: cluster.foreground_exit), lambda rc: rc is not None, 10, "slurmctld exit"
        )
        assert cluster.foreground_exit == 1
        assert "failed to initialize preempt plugin" in cluster.ctld_stderr_tail()
        # the kubelet starts the container again: a fresh slurmctld -D on the files now on disk
        await cluster.start_slurmctld()
        assert (await cluster.client().show_config())["PreemptType"] == preempt
        assert (await cluster.client().partitions())[0].max_time_minutes is None
        if cluster.release.short == "22.05":
            # 22.05 died without saving: a job that started moments before is requeued, not lost
            await cluster.wait_job(job, {"RUNNING", "PENDING"})
        else:  # 24.11 saved its state before the exec: the job runs on, untouched
            assert (await cluster.wait_job(job, "RUNNING")).start_time == started
        # and config-sync carries on: a fixed set applies
        fixed = edit(sync.good(), rb"MaxTime=INFINITE", b"MaxTime=45")
        sync.config.write(fixed)
        st = await sync.wait(set_sha(fixed))
        assert st["rejected"] is None
        assert (await cluster.client().partitions())[0].max_time_minutes == 45


@pytest.mark.per_release("each release's scontrol blocks and answers differently on a dead controller")
async def test_verify_sees_a_dead_controller_within_seconds(cluster: DevCluster) -> None:
    """A read of a dead controller blocks ~9 s in scontrol (then the client retries it); `scontrol
    ping` says DOWN at once. The verification must not wait on the former."""
    client = cluster.client()
    before = await view(client)
    conf = conffile.parse(read_set(cluster_files(cluster)), "slurm.conf", cluster.conf_path.parent)
    applier = Applier(client, settle_seconds=0.5, restart_timeout=5.0)
    await cluster.stop_slurmctld(crash=True)
    started = time.monotonic()
    outcome = await within(applier.verify(conf, conf, before, wait=3.0), 8.0)
    assert outcome.controller_died and not outcome.ok
    assert time.monotonic() - started < 7.0  # the wait, and room; not the ~9 s a read would block


@pytest.mark.per_release(
    "22.05 takes a new name on reconfigure, dies at its next start; 24.11 -D on the reconfigure"
)
async def test_new_cluster_name_is_refused_before_it_reaches_slurmctld(cluster: DevCluster) -> None:
    """Measured without this refusal: 22.05 took the new name on reconfigure (config-sync called it
    applied, and made it the last known good) and its next start died of `CLUSTER NAME MISMATCH`, a
    crash loop on the good set; 24.11 -D died of it on the reconfigure itself."""
    pid = cluster.foreground_pid()
    async with config_sync(cluster) as sync:
        good = sync.target_sha()
        files = edit(sync.good(), rb"ClusterName=\S+", b"ClusterName=renamed")
        sync.config.write(files)
        st = await sync.wait(set_sha(files), key="rejected")
        assert "ClusterName changed" in st["rejected"]["reason"]
        assert "CLUSTER NAME MISMATCH" in st["rejected"]["reason"]
        assert sync.target_sha() == good == st["applied"]["sha256"]
        assert await sync.metric("slurm_sidecars_config_applies_total", result="rejected") == 1
    assert cluster.foreground_pid() == pid and cluster.foreground_exit is None
    await cluster.restart_slurmctld()  # what the files on disk say still starts
    assert (await cluster.client().ping()).up


@pytest.mark.per_release("`scontrol shutdown` of slurmctld -D and its next start, per release")
async def test_restart_policy_restarts_a_foreground_controller(cluster: DevCluster) -> None:
    """`scontrol shutdown` ends slurmctld -D with status 0; the container (here a loop) starts it
    again on the new files, and the change is verified on the new process."""
    pid = cluster.foreground_pid()
    async with (
        config_sync(cluster, restart_policy="restart") as sync,
        container_restarts(cluster) as restarts,
    ):
        files = bump_max_job_count(sync.good())
        sync.config.write(files)
        st = await sync.wait(set_sha(files))
        assert st["applied"]["generation"] == 2 and st["rejected"] is None
        assert len(restarts) == 1 and cluster.foreground_pid() == cluster.hostpid("slurmctld") != pid
        assert (await cluster.client().show_config())["MaxJobCount"] == "12345"


async def test_a_restart_within_the_second_slurmctld_booted_in_is_seen(cluster: DevCluster) -> None:
    """BOOT_TIME has 1-s resolution. A container that restarts slurmctld quickly, soon after its
    previous start, gives the new controller the same BOOT_TIME: the restart must still be seen
    (before, config-sync waited out its time-out and rolled back files slurmctld was running on)."""
    client = cluster.client()
    conf = conffile.parse(read_set(cluster_files(cluster)), "slurm.conf", cluster.conf_path.parent)
    # room for a loaded machine's restart: the restart missed would still wait all of it, and fail
    applier = Applier(client, settle_seconds=0.2, restart_timeout=30.0)
    await asyncio.sleep(1.0 - time.time() % 1.0)  # at the start of a second...
    await cluster.restart_slurmctld()  # ...slurmctld boots
    before = await view(client)
    async with container_restarts(cluster) as restarts:
        outcome = await applier.restart(conf, conf, before)
    assert outcome.ok, outcome.reason
    assert len(restarts) == 1
    assert (await client.show_config())["BOOT_TIME"] != before.config["boot_time"]
