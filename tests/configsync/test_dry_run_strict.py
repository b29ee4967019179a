"""The dry run as strict as a real start of slurmctld (24.11 and later re-exec it on reconfigure),
found by experiment on every release:

- what slurmctld still does once it says it is primary can be fatal: 22.05 initialises its priority
  plugin there (a bad PriorityWeightTRES kills it after "Running as primary controller"); 24.11 and
  26.05 do it before. The dry run waits until its slurmctld answers on its port, which it opens after;
- what the dry run rewrites is tested anyway: node records keep their shape (the count of addresses,
  host names and ports slurmctld checks, fatal at start), and the controller records, which it
  replaces with this host, are checked against the hosts a controller runs on now.
"""

from __future__ import annotations

import re

import pytest

from sidecars.configsync import conffile
from sidecars.devcluster import DevCluster
from tests.configsync.harness import cluster_files, read_set
from tests.configsync.test_dry_run import runner

pytestmark = pytest.mark.cluster(nodes=2, foreground_ctld=True)

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
