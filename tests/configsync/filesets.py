"""Sets of files as the staging and guard tests stage them: two sets that must never mix (each
includes a file the other lacks), the steps a swap goes through, and the set a target holds."""

from __future__ import annotations

from pathlib import Path

from sidecars.configsync.fileset.sources import FileEntry, FileSet, read_source

STEPS = ("written", "swapped", "linked")


def fileset(files: dict[str, bytes], mode: int = 0o644) -> FileSet:
    return FileSet.build([FileEntry(n, d, mode, len(d), Path("/src")) for n, d in files.items()])


def seen(target: Path) -> FileSet:
    entries, problems = read_source(target, 1 << 20)
    assert not problems
    return FileSet.build(entries)


OLD = {"slurm.conf": b"ClusterName=old\nInclude /x/gone.conf\n", "gone.conf": b"# only in old\n"}
NEW = {"slurm.conf": b"ClusterName=new\nInclude /x/added.conf\n", "added.conf": b"# only in new\n"}


class Crash(Exception):
    pass
