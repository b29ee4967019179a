"""The dry run as strict as a real start of slurmctld (24.11 and later re-exec it on reconfigure),
found by experiment on every release:

- what slurmctld still does once it says it is primary can be fatal: 22.05 initialises its priority
  plugin there (a bad PriorityWeightTRES kills it after "Running as primary controller"); 24.11 and
  26.05 do it before. The dry run waits until its slurmctld answers on its port, which it opens after;
- what the dry run rewrites is tested anyway: node records keep their shape (the count of addresses,
  host names and ports slurmctld checks, fatal at start), the controller records, which it
  replaces with this host, are checked against the hosts a controller runs on now, and a changed
  jobcomp/script (it runs jobcomp/none) must exist.
"""

from __future__ import annotations

import re

import pytest

from sidecars.configsync.dryrun.rewrite_checks import identity_problem
from sidecars.configsync.fileset import conffile
from sidecars.devcluster import ClusterError, DevCluster
from tests.configsync.harness import cluster_files, config_sync, read_set, set_sha
from tests.configsync.test_dry_run import runner

pytestmark = [
    pytest.mark.cluster(nodes=2, foreground_ctld=True),
    pytest.mark.per_release(
        "what slurmctld refuses at start, and when (22.05 at once, 23.11+ after primary), is each release's"
    ),
]

BAD_WEIGHTS = "PriorityType=priority/multifactor\nPriorityWeightTRES=cpu=abc\n"
# release -> whether its slurmctld meets that fatal only after it is primary (measured)
DEFERS_PRIORITY = {"22.05": True, "24.11": False, "26.05": False}


def with_lines(cluster: DevCluster, text: str) -> tuple[conffile.SlurmConf, dict[str, bytes]]:
    base = cluster_files(cluster)
    current = conffile.parse(read_set(base), "slurm.conf", cluster.conf_path.parent)
    return current, {**base, "slurm.conf": base["slurm.conf"] + text.encode()}


async def test_a_fatal_reached_only_once_primary_is_caught(cluster: DevCluster) -> None:
    current, files = with_lines(cluster, BAD_WEIGHTS)
    result = await runner(cluster, stay_seconds=0.0, timeout=10.0).run(read_set(files), current)
    assert not result.ok
    assert "fatal: failed to parse tres weights str 'cpu=abc'" in result.reason, result.reason
    deferred = result.reason.startswith("after it became the primary controller")
    assert deferred == DEFERS_PRIORITY[cluster.release.short], result.reason


@pytest.mark.parametrize(
    "line",
    [
        "NodeName=x[1-3] NodeAddr=127.0.0.1,127.0.0.1 CPUs=1 State=FUTURE",
        "NodeName=x[1-3] NodeHostname=a,b CPUs=1 State=FUTURE",
        "NodeName=x[1-3] Port=1,2 CPUs=1 State=FUTURE",
    ],
    ids=["addresses", "hostnames", "ports"],
)
async def test_node_records_keep_the_shape_slurmctld_checks(cluster: DevCluster, line: str) -> None:
    """Two addresses (host names, ports) for three nodes, on nodes that run nothing: Slurm's client
    parse accepts it, slurmctld does not start on it ("... count must equal that of NodeName records")."""
    current, files = with_lines(cluster, line + "\n")
    result = await runner(cluster, timeout=10.0).run(read_set(files), current)
    assert not result.ok
    assert re.search(r"fatal: (NodeAddr|Port) count must equal that of NodeName records", result.reason)
    # one address (one port) for the three, or one each: fine
    current, files = with_lines(cluster, re.sub(r"=(\S+),\S+ ", r"=\1 ", line) + "\n")
    assert (await runner(cluster, timeout=10.0).run(read_set(files), current)).ok


async def test_controller_records_must_still_name_where_slurmctld_runs(cluster: DevCluster) -> None:
    base = cluster_files(cluster)
    current = conffile.parse(read_set(base), "slurm.conf", cluster.conf_path.parent)
    host = (await cluster.client().show_config())["SlurmctldHost[0]"].split("(")[0]
    moved = re.sub(rb"(?m)^SlurmctldHost=.*$", b"SlurmctldHost=ctld-elsewhere(127.0.0.1)", base["slurm.conf"])
    checked = runner(cluster, client=cluster.client(), timeout=10.0)
    result = await checked.run(read_set({**base, "slurm.conf": moved}), current)
    assert not result.ok
    assert f"no longer name {host}, where slurmctld runs now" in result.reason, result.reason
    # a backup added beside it: still named, fine
    backup = base["slurm.conf"].replace(
        b"\nSlurmctldPort", b"\nSlurmctldHost=backup-host(127.0.0.1)\nSlurmctldPort", 1
    )
    assert backup != base["slurm.conf"]
    assert (await checked.run(read_set({**base, "slurm.conf": backup}), current)).ok


async def test_a_job_completion_script_the_dry_run_does_not_run_must_exist(cluster: DevCluster) -> None:
    """The dry run runs jobcomp/none: a jobcomp/script set is checked by config-sync instead. On
    24.11 and 26.05 a restart on a missing script dies ("Failed to initialize jobcomp plugin")."""
    missing = cluster.dir / "no-such-jobcomp-script"
    current, files = with_lines(cluster, f"JobCompType=jobcomp/script\nJobCompLoc={missing}\n")
    result = await runner(cluster, timeout=10.0).run(read_set(files), current)
    assert not result.ok
    assert f"JobCompLoc={missing}: no executable file here" in result.reason, result.reason
    script = cluster.dir / "jobcomp.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    current, good = with_lines(cluster, f"JobCompType=jobcomp/script\nJobCompLoc={script}\n")
    assert (await runner(cluster, timeout=10.0).run(read_set(good), current)).ok
    if cluster.release.short != "22.05":  # the live slurmctld on the refused set (22.05 starts on it)
        await cluster.stop_slurmctld(crash=True)
        cluster.conf_path.write_bytes(files["slurm.conf"])
        with pytest.raises(ClusterError, match="Failed to initialize jobcomp plugin"):
            await cluster.start_slurmctld(timeout=15.0)


def test_the_controller_records_are_compared_as_slurmctld_compares_its_host_name() -> None:
    """Short or full name alike (slurmctld tries both); every running controller must stay named."""
    assert identity_problem(["vm.example.com", "backup"], ["vm", "backup"]) is None
    problem = identity_problem(["vm"], ["vm", "backup"])
    assert problem is not None and "no longer name backup," in problem
    assert identity_problem([], ["vm"]) is not None
    assert identity_problem(["elsewhere"], []) is None  # no controller answers: nothing to compare


async def test_config_sync_refuses_the_set_and_the_live_controller_lives(cluster: DevCluster) -> None:
    """End to end: the set is never applied, in Slurm's words; the live slurmctld runs on. The
    control: a restart of the live slurmctld on that set dies, after "primary" where the release
    defers the fatal."""
    pid = cluster.foreground_pid()
    async with config_sync(cluster) as sync:
        good = sync.target_sha()
        files = {**sync.good(), "slurm.conf": sync.good()["slurm.conf"] + BAD_WEIGHTS.encode()}
        sync.config.write(files)
        st = await sync.wait(set_sha(files), key="rejected")
        reason = st["rejected"]["reason"]
        assert "failed to parse tres weights str 'cpu=abc'" in reason, reason
        deferred = DEFERS_PRIORITY[cluster.release.short]
        assert ("after it became the primary controller" in reason) == deferred, reason
        assert sync.target_sha() == good
    assert cluster.foreground_pid() == pid and cluster.foreground_exit is None
    await cluster.stop_slurmctld(crash=True)
    cluster.conf_path.write_bytes(files["slurm.conf"])
    with pytest.raises(ClusterError, match="failed to parse tres weights"):
        await cluster.start_slurmctld(timeout=15.0)
    said = cluster.ctld_stderr_tail(100_000)
    assert ("Running as primary controller" in said) == deferred, said[-1500:]
