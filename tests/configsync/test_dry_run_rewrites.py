"""What the dry run rewrites for isolation, tested as Slurm tests it (docs/config-sync-dry-run.md).

The throwaway's node records carry 127.0.0.1 and a closed port, so Slurm's own checks of a record's
ports and addresses never run there. config-sync runs Slurm's port rule (node_conf.c) on the values
as written; each release's own slurmctld, started on the same value with the records left as they
are (the control), dies with the same fatal. An unresolvable or out-of-range address kills no
release: the control starts, and the dry run passes it too. A list config-sync cannot expand is
named and the set is not applied.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.configsync.dryrun.rewrite_checks import (
    RecordProblems,
    c_atoi,
    node_record_problems,
    relative_path_problems,
)
from sidecars.configsync.dryrun.runner import DryRunner
from sidecars.configsync.dryrun.sandbox import isolate_nodes
from sidecars.configsync.fileset import conffile
from sidecars.configsync.judge.validate import Validator
from sidecars.devcluster import DevCluster
from tests.configsync.harness import cluster_files, config_sync, key_secret, read_set, set_sha
from tests.configsync.test_dry_run import runner

CLASSIC = pytest.mark.cluster(nodes=2, foreground_ctld=True)
SLINKY = pytest.mark.cluster(shape="slinky", nodes=2, foreground_ctld=True)
# the Slinky shape (configless workers, auth/slurm) runs on 24.11 and 26.05; the classic on all three
SLINKY_RELEASES = pytest.mark.releases("slurm24", "slurm26")


class Unchecked(DryRunner):
    """The control: node records left as written (Slurm's own checks run), none of ours."""

    def isolate(self, text: str, dead_port: int) -> str:
        return text

    def record_problem(
        self, candidate: conffile.SlurmConf, current: conffile.SlurmConf | None = None
    ) -> str | None:
        return None


def secrets_of(cluster: DevCluster) -> dict[str, bytes]:
    """The Slinky shape's slurm.key (auth/slurm), mounted from a Secret beside slurm.conf."""
    return key_secret(cluster) if (cluster.conf_path.parent / "slurm.key").exists() else {}


def with_node(cluster: DevCluster, line: str) -> dict[str, bytes]:
    """The cluster's set with one node record added (no partition takes it: nothing else changes)."""
    base = cluster_files(cluster)
    return {**base, **secrets_of(cluster), "slurm.conf": base["slurm.conf"] + f"\n{line}\n".encode()}


def conf_of(text: str) -> conffile.SlurmConf:
    return conffile.parse(read_set({"slurm.conf": text.encode()}), "slurm.conf", Path("/etc/slurm"))


# ---------------------------------------------------------------- the rule, as Slurm has it


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("6818", 6818),
        ("6818x", 6818),  # atoi stops at the first non-digit
        ("  +17", 17),
        ("abc", 0),
        ("-1", -1),
        ("65536", 65536),
        ("4294967297", 1),  # the cast to int keeps the low 32 bits
        ("99999999999999999999999", -1),  # strtol clamps to LONG_MAX; (int) of it is -1
    ],
)
def test_atoi_as_glibc(text: str, value: int) -> None:
    assert c_atoi(text) == value


@pytest.mark.parametrize("port", ["0", "65536", "70000", "abc", "-5", "[65535-65536]"])
def test_a_port_out_of_slurms_range_is_fatal(port: str) -> None:
    found = node_record_problems(conf_of(f"NodeName=x[1-2] NodeAddr=127.0.0.1 Port={port} CPUs=1\n"))
    assert len(found.fatal) == 1 and not found.untestable, found
    assert f'"fatal: Invalid Port {port}"' in found.fatal[0]


@pytest.mark.parametrize("port", ["1", "6818", "65535", "6818x", "[6818-6819]", "6818,6819", "4294967297"])
def test_a_port_in_range_passes(port: str) -> None:
    assert node_record_problems(conf_of(f"NodeName=x[1-2] Port={port} CPUs=1\n")) == RecordProblems()


def test_a_default_lines_port_applies_to_the_records_after_it() -> None:
    """The throwaway gives each record a Port of its own, so a DEFAULT's is never tried there."""
    text = "NodeName=x1 CPUs=1\nNodeName=DEFAULT Port=70000\nNodeName=x2 CPUs=1\nNodeName=x3 Port=7000\n"
    found = node_record_problems(conf_of(text))
    assert len(found.fatal) == 1 and "NodeName=x2 Port=70000" in found.fatal[0], found
    assert "NodeName=x2 NodeAddr=127.0.0.1 Port=9 " in isolate_nodes(text, 9)


@pytest.mark.parametrize("key", ["NodeAddr", "NodeHostname", "Port"])
def test_a_list_config_sync_cannot_expand_is_named_untestable(key: str) -> None:
    found = node_record_problems(conf_of(f"NodeName=x1 {key}=10.0.0.[1-2 CPUs=1\n"))
    assert not found.fatal and len(found.untestable) == 1, found
    assert f"{key}=10.0.0.[1-2" in found.untestable[0]


# ---------------------------------------------------------------- Slurm's own fatal, each release


async def _port_refused_as_slurm_refuses(cluster: DevCluster) -> None:
    files = read_set(with_node(cluster, "NodeName=x9 NodeAddr=127.0.0.1 Port=70000 CPUs=1 State=UNKNOWN"))
    ours = await runner(cluster).run(files, None)
    assert not ours.ok and '"fatal: Invalid Port 70000"' in ours.reason, ours.reason
    assert ours.phases == {}  # refused before any throwaway started
    # the control: this release's own slurmctld on the same value, the record as written
    control = await runner(cluster, Unchecked).run(files, None)
    assert not control.ok and "fatal: Invalid Port 70000" in control.reason, control.reason


async def _address_passes_as_slurm_passes(cluster: DevCluster) -> None:
    for addr in ("10.0.0.300", "no-such-node.invalid"):
        files = read_set(with_node(cluster, f"NodeName=x9 NodeAddr={addr} CPUs=1 State=UNKNOWN"))
        control = await runner(cluster, Unchecked).run(files, None)
        assert control.ok, f"{addr}: {control.reason}"  # Slurm itself starts on it
        ours = await runner(cluster).run(files, None)
        assert ours.ok, f"{addr}: {ours.reason}"


async def _refused_through_config_sync(cluster: DevCluster) -> None:
    """The measured failure: applied, then `fatal: Invalid Port` at the reconfigure, rolled back."""
    pid = cluster.foreground_pid()
    secrets = secrets_of(cluster)
    async with config_sync(cluster, secrets=secrets) as sync:
        good = sync.target_sha()
        files = {
            **sync.good(),
            "slurm.conf": sync.good()["slurm.conf"] + b"\nNodeName=x9 NodeAddr=127.0.0.1 Port=70000 CPUs=1\n",
        }
        sync.config.write(files)
        st = await sync.wait(set_sha(files, secrets), key="rejected")
        assert "fatal: Invalid Port 70000" in st["rejected"]["reason"], st["rejected"]
        assert sync.target_sha() == good
    assert cluster.foreground_pid() == pid and cluster.foreground_exit is None


@CLASSIC
@pytest.mark.per_release("each release's slurmctld judges a node port itself")
async def test_an_out_of_range_port_is_refused_as_slurm_refuses_it(cluster: DevCluster) -> None:
    await _port_refused_as_slurm_refuses(cluster)
    await _refused_through_config_sync(cluster)


@SLINKY_RELEASES
@SLINKY
@pytest.mark.per_release("each release's slurmctld judges a node port itself")
async def test_an_out_of_range_port_is_refused_as_slurm_refuses_it_slinky(cluster: DevCluster) -> None:
    await _port_refused_as_slurm_refuses(cluster)
    await _refused_through_config_sync(cluster)


@CLASSIC
@pytest.mark.per_release("each release's slurmctld resolves (or not) an address at start")
async def test_an_unresolvable_address_passes_as_slurm_passes_it(cluster: DevCluster) -> None:
    await _address_passes_as_slurm_passes(cluster)


@SLINKY_RELEASES
@SLINKY
@pytest.mark.per_release("each release's slurmctld resolves (or not) an address at start")
async def test_an_unresolvable_address_passes_as_slurm_passes_it_slinky(cluster: DevCluster) -> None:
    await _address_passes_as_slurm_passes(cluster)


@pytest.mark.parametrize(
    "key", ["StateSaveLocation", "SlurmctldLogFile", "SlurmctldPidFile", "SlurmSchedLogFile"]
)
def test_a_changed_relative_path_is_named_untestable(key: str) -> None:
    old = conf_of(f"{key}=/var/spool/x\n")
    assert relative_path_problems(old, conf_of(f"{key}=/var/spool/y\n")) == []
    assert relative_path_problems(old, old) == []
    found = relative_path_problems(old, conf_of(f"{key}=spool/x\n"))
    assert len(found) == 1 and f"{key}=spool/x" in found[0], found


# ---------------------------------------------------------------- the keys the overrides replace


@CLASSIC
@pytest.mark.per_release("each release's client parse runs its own checks")
async def test_what_the_overrides_replace_is_judged_by_slurms_client_parse(cluster: DevCluster) -> None:
    """The throwaway's own SlurmctldPort, debug levels and controller record replace the set's
    (Slurm takes the last value), so slurmctld's checks of those never see the set's values: the dry
    run alone passes them. Slurm's client parse of the set as written runs the same checks
    (src/common/read_config.c, which slurmctld runs too), and the validation refuses in its words."""
    base = cluster_files(cluster)
    work = cluster.dir / "validate-work"
    work.mkdir()
    checks = Validator(
        cluster.client(),
        cluster.conf_path.parent,
        work,
        dry_runner=runner(cluster, timeout=10.0),
        plugin_dir=await cluster.plugin_dir(),
    )
    for value, words in (
        ("SlurmctldPort=abc", "Invalid SlurmctldPort abc"),
        ("SlurmctldDebug=bogus", "Invalid SlurmctldDebug bogus"),
        ("SlurmctldSyslogDebug=bogus", "Invalid SlurmctldSyslogDebug bogus"),
        ("SlurmctldHost=", "Parse error in file"),
    ):
        files = read_set({**base, "slurm.conf": base["slurm.conf"] + f"\n{value}\n".encode()})
        alone = await runner(cluster).run(files, None)
        assert alone.ok, f"{value}: {alone.reason}"  # hidden from the throwaway by its overrides
        verdict = await checks.validate(files, read_set(base))
        assert not verdict.ok and words in verdict.reason, f"{value}: {verdict.reason}"


@CLASSIC
@pytest.mark.per_release("22.05's client parse loads no plugin; later releases differ")
async def test_only_the_exact_slurmdbd_plugin_is_replaced(cluster: DevCluster) -> None:
    """The throwaway runs accounting_storage/none instead of slurmdbd (it must not reach it). Any
    other spelling is left to it: slurmctld loads plugins by their exact name and dies of this one
    (22.05's client parse does not load it, so only the throwaway can tell)."""
    base = cluster_files(cluster)
    files = read_set(
        {**base, "slurm.conf": base["slurm.conf"] + b"\nAccountingStorageType=accounting_storage/SlurmDBD\n"}
    )
    result = await runner(cluster).run(files, None)
    assert not result.ok and "accounting_storage" in result.reason, result.reason


@CLASSIC
async def test_a_changed_relative_path_is_held_not_applied(cluster: DevCluster) -> None:
    base = cluster_files(cluster)
    current = conf_of(base["slurm.conf"].decode())
    files = read_set({**base, "slurm.conf": base["slurm.conf"] + b"\nSlurmctldPidFile=run/ctld.pid\n"})
    result = await runner(cluster).run(files, current)
    assert not result.ok and result.reason.startswith("held, not applied"), result.reason
    assert "SlurmctldPidFile=run/ctld.pid" in result.reason


def test_a_continued_node_line_is_isolated_whole() -> None:
    """Slurm reads a line ending in a backslash with the next: the record is rewritten whole, not
    left with its real address and port in the throwaway's copy."""
    text = "NodeName=a1 NodeAddr=10.0.0.1 \\\n  Port=6818 CPUs=1\nPartitionName=p Nodes=a1\n"
    assert (
        isolate_nodes(text, 9) == "NodeName=a1 NodeAddr=127.0.0.1 Port=9 CPUs=1\nPartitionName=p Nodes=a1\n"
    )
