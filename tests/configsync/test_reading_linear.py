"""config-sync reads any text in time linear in its size (issue 33): its own parse of slurm.conf
(words as shlex splits them, comments, continuation lines), the diff and the secret values, over
the shapes that held it for minutes, and, by property, the same words as shlex on any line."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecars.configsync.dryrun import sandbox
from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.sources import FileEntry, FileSet
from sidecars.configsync.plans.plan import secret_values
from sidecars.configsync.report.history import changes
from tests.costs import superlinear

BASE = "ClusterName=c\nSlurmctldHost=h\nNodeName=n[1-4] CPUs=2\nPartitionName=p Nodes=ALL\n"

# the shapes of issue 33's sets, at any size
SHAPES: dict[str, Callable[[int], str]] = {
    "one-word comment": lambda n: BASE + "#" + "x" * n + "\n",
    "keys without values": lambda n: BASE + "K= " * (n // 3) + "\n",
    "feature list": lambda n: (
        BASE + "NodeName=f1 Features=" + ",".join(f"f{i}" for i in range(n // 6)) + "\n"
    ),
    "short lines": lambda n: BASE + "".join(f"NodeName=s{i} CPUs=1\n" for i in range(n // 20)),
    "one repeated key": lambda n: BASE + "SchedulerParameters=x " * (n // 22) + "\n",
    "unterminated quote": lambda n: BASE + 'SlurmctldParameters="' + "y" * n + "\n",
    "key-like run, no newline": lambda n: BASE + "Abc" * (n // 3),
    "secret value": lambda n: BASE + "AccountingStoragePass=" + "s" * n + "\n",
    "continuation lines": lambda n: BASE + "NodeName=c1 \\\n" + "CPUs=1 \\\n" * (n // 9) + "\n",
    "quoted words": lambda n: BASE + 'NodeName=q1 Features="a b"' * (n // 24) + "\n",
}


def fileset(text: str) -> FileSet:
    data = text.encode()
    return FileSet.build([FileEntry("slurm.conf", data, 0o644, len(data), Path("/config"))])


def read(text: str) -> object:
    files = fileset(text)
    conf = conffile.parse(files, "slurm.conf", Path("/etc/slurm"))
    old = fileset(BASE)
    return conf, changes(old, files), secret_values((files, old), frozenset())


@pytest.mark.parametrize("shape", SHAPES)
def test_reading_a_set_costs_linear_in_its_size(shape: str) -> None:
    assert superlinear(SHAPES[shape], read, 50_000, 500_000) is None


@pytest.mark.parametrize("shape", SHAPES)
def test_the_throwaways_copy_of_a_set_costs_linear_in_its_size(shape: str) -> None:
    # the dry run's slurm.conf with every node moved to 127.0.0.1: a NodeName record continued over
    # many lines was joined by copying the growing line at each one (0.5 s at 80,000 lines)
    assert superlinear(SHAPES[shape], lambda text: sandbox.isolate_nodes(text, 1), 50_000, 500_000) is None


def shlex_words(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=False, posix=True)
    except ValueError:
        return line.split()


@settings(max_examples=500, deadline=5000)  # a generous budget per example on a loaded machine
@given(st.text(alphabet=st.sampled_from(list("ab=,\\\"' \t#x\r")), max_size=40))
def test_words_are_shlexs(line: str) -> None:
    assert conffile.words(line) == shlex_words(line)


@settings(max_examples=200, deadline=5000)
@given(st.text(max_size=400))
def test_any_text_parses_within_budget(text: str) -> None:
    conf = conffile.parse(fileset(text), "slurm.conf", Path("/etc/slurm"))
    assert isinstance(conf.options, dict)
