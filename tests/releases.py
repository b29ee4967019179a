"""Which releases a test that needs Slurm runs on (tests/conftest.py parametrizes `release` with it).

Only a test whose behaviour differs between releases runs on all three; it says why:

    @pytest.mark.per_release("23.11+ re-execs slurmctld on reconfigure; 22.05 rereads in place")
    async def test_a_reconfigure_keeps_the_jobs(cluster: DevCluster) -> None: ...

Every other test runs on ONE release, chosen from its id (the test function's node id, without its
parameters) by a stable hash: the same release in every run, on every machine and in every xdist
worker (whose collections must agree), and the three releases share the unmarked tests about evenly,
so each release still starts, schedules and answers under a third of them. `releases(*ids)` narrows
the choice (a test that holds only on some releases), and `per_release` then runs it on each of
those. `--every-release` runs every test on every release it allows (the suite before issue #34, or a
developer's `--every-release -k slurm24` to see one test on one release).

Every test file has been read for the marker (issue #34). A reviewer unsure whether a test differs
marks it: coverage is kept by default, never lost by omission.
"""

from __future__ import annotations

import zlib

import pytest

# the id of each release, in the order tests run, and the `Release` name it stands for
RELEASE_IDS = {"slurm22": "host", "slurm24": "chroot", "slurm26": "sid"}
EVERY_RELEASE_OPTION = "--every-release"
PER_RELEASE = "per_release"


def one_release(test_id: str, ids: list[str]) -> str:
    """The one release of `ids` an unmarked test runs on: a stable hash of its id (crc32, never
    Python's `hash`, which differs per process and would split xdist's workers' collections)."""
    return ids[zlib.crc32(test_id.encode()) % len(ids)]


def release_ids(definition: pytest.Function, every_release: bool) -> list[str]:
    """The release ids a test function runs on (see the module's docstring)."""
    ids = list(RELEASE_IDS)
    narrowed = definition.get_closest_marker("releases")
    if narrowed is not None:
        unknown = [a for a in narrowed.args if a not in RELEASE_IDS]
        if unknown or not narrowed.args:
            raise pytest.UsageError(
                f"{definition.nodeid}: @pytest.mark.releases({', '.join(map(repr, narrowed.args))}):"
                f" expected one or more of {', '.join(RELEASE_IDS)}"
            )
        ids = [i for i in ids if i in narrowed.args]
    marker = definition.get_closest_marker(PER_RELEASE)
    if marker is not None and (len(marker.args) != 1 or not str(marker.args[0]).strip()):
        raise pytest.UsageError(
            f"{definition.nodeid}: @pytest.mark.{PER_RELEASE} takes one argument: why the test's"
            " behaviour differs between releases"
        )
    test_id = definition.nodeid.split("[", 1)[0]
    if every_release or marker is not None:
        return ids
    return [one_release(test_id, ids)]
