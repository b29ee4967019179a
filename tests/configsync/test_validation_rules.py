"""The checks Slurm's client parse does not make, and the restart table, without a cluster."""

from __future__ import annotations

from pathlib import Path

from sidecars.configsync.dryrun.slurmctld_opens import path_problems
from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.sources import FileEntry, FileSet
from sidecars.configsync.judge import restart
from sidecars.configsync.judge.validate import MAX_FEATURES, file_problems, semantic_problems
from sidecars.slurm.models import Version

T = Path("/etc/slurm")
BASE = """ClusterName=c
SlurmctldHost=vm(127.0.0.1)
NodeName=DEFAULT CPUs=1
NodeName=n[1-2] Port=7001 # a comment
NodeSet=gpu Nodes=n1
PartitionName=DEFAULT MaxTime=10
PartitionName=all Nodes=ALL Default=YES
PartitionName=g Nodes=gpu,n2
"""


def files(extra: str = "", **more: bytes) -> FileSet:
    entries = {"slurm.conf": (BASE + extra).encode(), **more}
    return FileSet.build([FileEntry(n, d, 0o644, len(d), T) for n, d in entries.items()])


def problems(fs: FileSet) -> list[str]:
    return semantic_problems(conffile.parse(fs, "slurm.conf", T))


def test_a_sound_config_has_no_problems() -> None:
    conf = conffile.parse(files(), "slurm.conf", T)
    assert conf.node_names() == ["n1", "n2"]
    assert set(conf.partitions()) == {"all", "g"}
    assert semantic_problems(conf) == []


def test_unknown_and_duplicate_nodes() -> None:
    assert problems(files("PartitionName=p Nodes=n[2-3]\n")) == [
        "slurm.conf:9: partition p names unknown node(s) n3"
    ]
    assert problems(files("NodeName=n2 Port=7002\n")) == ["node n2 is defined 2 times"]


def test_includes_must_name_files_of_the_set() -> None:
    ok = files(
        "Include /etc/slurm/more.conf\ninclude more2.conf\n",
        **{"more.conf": b"PartitionName=m Nodes=n1\n", "more2.conf": b"# x\n"},
    )
    assert problems(ok) == []
    assert "m" in conffile.parse(ok, "slurm.conf", T).partitions()
    assert "points outside the set" in problems(files("Include /etc/other/x.conf\n"))[0]
    assert "not in the set" in problems(files("Include /etc/slurm/nope.conf\n"))[0]
    # an include in an included file is followed, once (a loop does not hang)
    loop = files(
        "Include a.conf\n", **{"a.conf": b"Include /etc/slurm/slurm.conf\nPartitionName=x Nodes=n9\n"}
    )
    assert problems(loop) == ["a.conf:2: partition x names unknown node(s) n9"]


def test_file_checks_spare_key_material() -> None:
    key = FileEntry("munge.key", b"\0\xff", 0o600, 2, T)
    fs = FileSet.build([*files().files.values(), key])
    assert file_problems(fs, None, "slurm.conf", 1 << 20) == []
    gone = file_problems(files(), fs, "slurm.conf", 1 << 20)
    assert gone == ["key file munge.key was removed from the set"]


def test_restart_table_is_release_aware() -> None:
    old_fs, new_fs = files(), files("NodeName=n9 Port=7009\nSlurmctldPort=7000\n")
    old = conffile.parse(old_fs, "slurm.conf", T)
    new = conffile.parse(new_fs, "slurm.conf", T)
    on_22 = [r.what for r in restart.classify(old, new, old_fs, new_fs, Version(22, 5, 8))]
    on_24 = [r.what for r in restart.classify(old, new, old_fs, new_fs, Version(24, 11, 5))]
    assert on_22 == ["slurmctldport changed", "nodes added: n9"]
    assert on_24 == ["slurmctldport changed"]
    plain = files("MaxTime=5\n")
    assert (
        restart.classify(old, conffile.parse(plain, "slurm.conf", T), old_fs, plain, Version(22, 5, 8)) == []
    )
    assert all(source for source in restart.RESTART_KEYS.values())


def test_a_changed_path_slurmctld_opens_needs_its_directory(tmp_path: Path) -> None:
    def conf(extra: str) -> conffile.SlurmConf:
        return conffile.parse(files(extra), "slurm.conf", T)

    here, nowhere = tmp_path / "log", tmp_path / "nowhere"
    here.mkdir()
    old = conf(f"SlurmctldPidFile={nowhere}/ctld.pid\nJobCompType=jobcomp/none\n")
    # unchanged: it may be in a volume only slurmctld's container mounts, and it runs on it now
    assert path_problems(old, old) == []
    assert path_problems(None, conf(f"SlurmctldLogFile={nowhere}/x.log\n")) == []  # nothing to compare
    bad = conf(f"SlurmctldPidFile={nowhere}/ctld.pid\nJobCompType=jobcomp/filetxt\nJobCompLoc={nowhere}/jc\n")
    assert path_problems(old, bad) == [
        f"JobCompLoc={nowhere}/jc: no directory {nowhere} where config-sync sees the files (mount it here "
        "too if only slurmctld's container has it); slurmctld would die opening it"
    ]
    fine = conf(
        f"SlurmctldPidFile={nowhere}/ctld.pid\nJobCompType=jobcomp/filetxt\nJobCompLoc={here}/jc\n"
        f"SlurmctldLogFile={here}/ctld.log\nStateSaveLocation={here}\n"
    )
    assert path_problems(old, fine) == []
    moved = conf(
        f"SlurmctldPidFile={nowhere}/ctld.pid\nStateSaveLocation={nowhere}\nSlurmSchedLogFile={nowhere}/s\n"
    )
    assert [p.split(":")[0] for p in path_problems(old, moved)] == [
        f"SlurmSchedLogFile={nowhere}/s",
        f"StateSaveLocation={nowhere}",
    ]
    # another plugin's JobCompLoc is a URL or a host, not a file
    assert path_problems(old, conf("JobCompType=jobcomp/elasticsearch\nJobCompLoc=http://es:9200\n")) == []


def test_node_features_past_the_cap_are_refused_before_slurm_runs() -> None:
    # slurmctld's start time grows with the square of the features it reads (validate.MAX_FEATURES)
    at_cap = ",".join(f"f{i}" for i in range(MAX_FEATURES))
    assert problems(files(f"NodeName=n3 Features={at_cap}\n")) == []
    over = problems(files(f"NodeName=n3 Feature={at_cap},one_more\n"))
    assert over == [
        f"slurm.conf:9: node n3 lists {MAX_FEATURES + 1} features, over the cap of {MAX_FEATURES}: "
        "slurmctld's start and reconfigure time grow with the square of the features it reads "
        "(not tried by Slurm; docs/limits.md)"
    ]
    # repeats on one line count (Slurm reads each), and distinct ones over every line add up
    assert "lists" in problems(files(f"NodeName=n3 Features={'f,' * MAX_FEATURES}f\n"))[0]
    half = MAX_FEATURES // 2 + 1
    split = files(
        "NodeName=n3 Features=" + ",".join(f"a{i}" for i in range(half)) + "\n"
        "NodeName=n4 Features=" + ",".join(f"b{i}" for i in range(half)) + "\n"
    )
    assert problems(split) == [
        f"the node lines name {2 * half} distinct features, over the cap of {MAX_FEATURES}: slurmctld's "
        "start and reconfigure time grow with the square of the features it reads (not tried by "
        "Slurm; docs/limits.md)"
    ]
