"""Slurm commands are counted under their Slurm name, from a short fixed list, whatever runs them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sidecars.devcluster import DevCluster
from sidecars.slurm import SlurmMetrics, naming
from sidecars.slurm.runner import run, spawn
from sidecars.slurm.throwaway import helper_argv

# every value the `command` label may take: what a dashboard is built on
EXPECTED = {
    "sacct", "sacctmgr", "sackd", "salloc", "sattach", "sbatch", "sbcast", "scancel", "scontrol",
    "scrontab", "sdiag", "sinfo", "slurmctld", "slurmd", "slurmdbd", "slurmrestd", "slurmstepd",
    "sprio", "squeue", "sreport", "srun", "sshare", "sstat", "strigger",
    "scontrol show", "scontrol update", "scontrol create", "scontrol delete", "scontrol reconfigure",
    "scontrol ping", "scontrol shutdown", "scontrol takeover", "scontrol reboot", "scontrol token",
}  # fmt: skip


def labels_seen(registry: CollectorRegistry) -> set[str]:
    return {
        s.labels["command"]
        for m in registry.collect()
        if m.name in ("slurm_sidecars_slurm_commands", "slurm_sidecars_slurm_command_seconds")
        for s in m.samples
        if "command" in s.labels
    }


def test_the_label_set_is_slurms_names_and_bounded() -> None:
    assert naming.labels() == EXPECTED
    cases = {
        ("/usr/sbin/slurmd-wlm", "-V"): "slurmd",  # Debian's binary behind the alternatives link
        ("/usr/sbin/slurmctld-wlm (deleted)", "-V"): "slurmctld",  # /proc/PID/exe of a replaced binary
        ("slurmd-24.11", "-V"): "slurmd",
        ("/tmp/slc-1/bin/sinfo", "--json"): "sinfo",  # a dev cluster's shim
        (
            "nsenter",
            "-t",
            "7",
            "-p",
            "-m",
            "--",
            "env",
            "-i",
            "PATH=/usr/bin",
            "SLURM_CONF=/e/slurm.conf",
            "squeue",
            "--json",
        ): "squeue",
        ("chroot", "/srv/root", "scontrol", "reconfigure"): "scontrol reconfigure",
        ("scontrol", "update", "nodename=n1", "reason=slurmd"): "scontrol update",
        ("scontrol", "-o", "show", "node"): "scontrol",
        ("scontrol", "/etc/passwd"): "scontrol",  # an argument is never a label
        ("sbatch", "/home/u/scontrol"): "sbatch",
        ("env", "SLURM_CONF=/etc/slurm/sinfo.conf", "scontrol", "ping"): "scontrol ping",
        ("python3", "-c", "print(1)"): None,
        ("true",): None,
        ("sh", "-c", "exec scontrol ping"): None,
    }
    for argv, want in cases.items():
        assert naming.label(argv) == want, argv
        assert want is None or want in EXPECTED
    assert naming.label(helper_argv(["slurmctld", "-D", "-f", "/x/slurm.conf"], "netns")) == "slurmctld"
    assert naming.label(helper_argv(["true"], "netns")) is None


@pytest.mark.cluster(nodes=2)
async def test_what_a_process_ran_is_counted_by_slurm_name(cluster: DevCluster, tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = SlurmMetrics(registry)
    client = cluster.client(metrics=metrics)
    await client.version()
    await client.nodes()
    await client.jobs()
    await client.partitions()
    await client.reservations()
    await client.sdiag_rpcs()
    await client.ping()
    await client.drain(["n2"], "slurm-sidecars: labels")
    await client.undrain(["n2"])
    # slurmd as the host installs it (Debian's slurmd-wlm) or entered through the namespace and chroot
    binary = os.path.realpath("/usr/sbin/slurmd") if cluster.release.root is None else None
    argv = [binary, "-V"] if binary else cluster.in_namespace("slurmd", "-V")
    await run(argv, env=cluster.env, metrics=metrics)
    # the dry run's helper: a Python interpreter that execs the Slurm program (here, a short one)
    async with spawn(
        helper_argv(["scontrol", "ping"], "ports"), stdout=tmp_path / "out", env=cluster.env, metrics=metrics
    ) as child:
        await child.wait()
    await run(helper_argv(["true"], "ports"), metrics=metrics)  # no Slurm program: counted nowhere
    seen = labels_seen(registry)
    assert seen <= EXPECTED, seen - EXPECTED
    assert {"scontrol", "scontrol update", "scontrol ping", "slurmd", "sdiag"} <= seen, seen
    ok = registry.get_sample_value(
        "slurm_sidecars_slurm_commands_total", {"command": "slurmd", "result": "ok"}
    )
    assert ok == 1
    spawned = registry.get_sample_value(
        "slurm_sidecars_slurm_commands_total", {"command": "scontrol ping", "result": "exited"}
    )
    assert spawned == 1
