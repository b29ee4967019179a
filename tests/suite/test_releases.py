"""Which releases a test runs on (tests/releases.py): only a `per_release` test on all three."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.releases import RELEASE_IDS, one_release, release_ids


class _Definition:
    """What `release_ids` reads of a collected test function: its node id and its markers."""

    def __init__(self, nodeid: str, *marks: pytest.MarkDecorator) -> None:
        self.nodeid = nodeid
        self.marks = {m.mark.name: m.mark for m in marks}

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.marks.get(name)


def _ids(nodeid: str, *marks: pytest.MarkDecorator, every: bool = False) -> list[str]:
    return release_ids(_Definition(nodeid, *marks), every)  # type: ignore[arg-type]


def test_an_unmarked_test_runs_on_one_release_the_same_in_every_process() -> None:
    nodeid = "tests/worker/test_x.py::test_a_drain"
    ids = _ids(nodeid)
    assert len(ids) == 1
    # crc32, not Python's per-process hash: xdist's workers must collect the same ids (a value
    # computed here once, so a change of the rule shows)
    assert ids == [one_release(nodeid, list(RELEASE_IDS))] == ["slurm26"]
    # its parameters do not move it: every case of one function runs on the same release
    assert _ids(nodeid + "[a-b]") == ids


def test_the_three_releases_share_the_unmarked_tests() -> None:
    share = Counter(_ids(f"tests/x/test_{i}.py::test_{i}")[0] for i in range(900))
    assert set(share) == set(RELEASE_IDS)
    assert min(share.values()) > 900 / 3 * 0.8, share


def test_a_per_release_test_runs_on_each_release_its_releases_marker_allows() -> None:
    why = pytest.mark.per_release("23.11+ re-execs slurmctld on reconfigure")
    assert _ids("tests/x/test_y.py::test_z", why) == list(RELEASE_IDS)
    assert _ids("tests/x/test_y.py::test_z", why, pytest.mark.releases("slurm24", "slurm26")) == [
        "slurm24",
        "slurm26",
    ]


def test_a_releases_marker_narrows_the_one_release_chosen() -> None:
    for i in range(30):
        assert _ids(f"tests/x/test_{i}.py::t", pytest.mark.releases("slurm24", "slurm26"))[0] in {
            "slurm24",
            "slurm26",
        }
    assert _ids("tests/x/test_y.py::t", pytest.mark.releases("slurm22")) == ["slurm22"]


def test_every_release_runs_an_unmarked_test_everywhere() -> None:
    assert _ids("tests/x/test_y.py::test_z", every=True) == list(RELEASE_IDS)


@pytest.mark.parametrize(
    "mark",
    [pytest.mark.per_release(), pytest.mark.per_release(" "), pytest.mark.per_release("a", "b")],
    ids=["no-reason", "blank-reason", "two-reasons"],
)
def test_a_per_release_marker_without_one_reason_is_a_collection_error(mark: pytest.MarkDecorator) -> None:
    with pytest.raises(pytest.UsageError, match="why the test's behaviour differs"):
        _ids("tests/x/test_y.py::test_z", mark)


def test_an_unknown_release_is_a_collection_error() -> None:
    with pytest.raises(pytest.UsageError, match="expected one or more of"):
        _ids("tests/x/test_y.py::test_z", pytest.mark.releases("slurm23"))
