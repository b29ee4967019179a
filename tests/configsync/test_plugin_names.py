"""A plugin name with no plugin file is refused before it reaches slurmctld: Slurm's client parse
loads no plugin, so a misspelt one passes it, and slurmctld dies loading it (on reconfigure, or at
its next start)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.configsync.dryrun.slurmctld_opens import plugin_problems
from sidecars.configsync.fileset import conffile
from sidecars.devcluster import DevCluster
from tests.configsync.harness import config_sync, read_set, set_sha


def conf(text: str) -> conffile.SlurmConf:
    return conffile.parse(read_set({"slurm.conf": text.encode()}), "slurm.conf", Path("/etc/slurm"))


def test_only_changed_plugin_keys_are_checked_and_none_needs_no_file(tmp_path: Path) -> None:
    for so in ("preempt_qos.so", "task_affinity.so", "task_cgroup.so", "job_submit_lua.so"):
        (tmp_path / so).write_bytes(b"")
    old = conf("ClusterName=c\nSchedulerType=sched/gone\nTaskPlugin=task/affinity\n")
    new = conf(
        "ClusterName=c\nSchedulerType=sched/gone\n"  # unchanged: slurmctld runs on it, it loaded
        "TaskPlugin=task/affinity,task/cgroup\nPreemptType=preempt/qos\nJobSubmitPlugins=lua\n"
        "JobCompType=jobcomp/none\nMCSPlugin=none\n"
    )
    assert plugin_problems(old, new, [tmp_path]) == []
    typo = conf("TaskPlugin=task/affinity,task/cgroupp\npreempttype=preempt/qos_typo\n")
    problems = plugin_problems(old, typo, [tmp_path / "missing", tmp_path])
    assert len(problems) == 2
    assert problems[0].startswith("PreemptType=preempt/qos_typo: no plugin preempt_qos_typo.so in ")
    assert "task_cgroupp.so" in problems[1]
    # with nothing to compare against (a first set), every plugin key is checked
    assert plugin_problems(None, old, [tmp_path]) == [
        f"SchedulerType=sched/gone: no plugin sched_gone.so in {tmp_path}; slurmctld would die loading it"
    ]


@pytest.mark.per_release("each release ships its own plugins")
async def test_a_misspelt_plugin_is_refused_and_a_real_one_passes(cluster: DevCluster) -> None:
    async with config_sync(cluster) as sync:
        good = sync.target_sha()
        files = sync.good()
        files["slurm.conf"] += b"PreemptType=preempt/qos_typo\n"
        sync.config.write(files)
        st = await sync.wait(set_sha(files), key="rejected")
        assert "no plugin preempt_qos_typo.so" in st["rejected"]["reason"]
        assert sync.target_sha() == good
        assert await sync.metric("slurm_sidecars_slurm_commands_total", command="scontrol reconfigure") == 0
        assert (await cluster.client().ping()).up
        # the release's real plugin passes (24.11's plugins are looked for in its chroot)
        files = sync.good()
        files["slurm.conf"] += b"PriorityType=priority/multifactor\n"
        verdict = await sync.service.validator.validate(read_set(files), read_set(sync.good()))
        assert verdict.ok, verdict.reason
