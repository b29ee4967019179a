"""The suite's own order under pytest-xdist: every worker's run of the collection starts with its
share of the long tests, longest first, and nothing is lost or run twice."""

from __future__ import annotations

from tests.scheduling import long_first

DEFAULT = 120.0


def runs(items: list[tuple[str, float]], workers: int) -> list[list[tuple[str, float]]]:
    """The runs worksteal hands out at the start: what is left, shared by the workers left."""
    out, left = [], list(items)
    for k in range(workers):
        size = len(left) // (workers - k)
        out.append(left[:size])
        left = left[size:]
    return out


def test_each_worker_starts_with_its_share_of_the_long_tests() -> None:
    # a folder of long tests in the middle of the collection, as the demo's tours are
    items = [(f"a{i}", 0.0) for i in range(50)]
    items += [(f"tour{i}", 240.0) for i in range(6)] + [("corpus", 900.0), ("window", 600.0)]
    items += [(f"z{i}", 0.0) for i in range(60)]
    ordered = long_first(items, 4, lambda i: i[1], DEFAULT)
    assert sorted(ordered) == sorted(items)  # nothing lost, nothing twice
    starts = [run[:2] for run in runs(ordered, 4)]
    assert [run[0][0] for run in starts] == ["corpus", "window", "tour0", "tour1"]
    assert [run[1][0] for run in starts] == ["tour2", "tour3", "tour4", "tour5"]
    # the short ones keep the collection's order
    assert [i for i in ordered if i[1] == 0.0] == [i for i in items if i[1] == 0.0]


def test_without_long_tests_the_collection_order_stands() -> None:
    items = [(f"t{i}", float(i % 3) * 60) for i in range(40)]  # none above the default
    assert long_first(items, 8, lambda i: i[1], DEFAULT) == items


def test_more_long_tests_than_a_run_holds_are_all_kept() -> None:
    items = [(f"l{i}", 300.0) for i in range(10)] + [("s", 1.0)]
    ordered = long_first(items, 2, lambda i: i[1], DEFAULT)
    assert sorted(ordered) == sorted(items)
