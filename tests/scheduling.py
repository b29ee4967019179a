"""The order the suite hands to pytest-xdist: long tests first, spread over the workers.

worksteal gives each worker a run of the collection, in order, and an idle worker steals from the
back of another's. A long test left in the middle of a run (a folder of them: the demo's tours, the
accounting clusters) is run after the ones before it by that one worker, and the whole suite waits
for it at the end. So each run starts with its share of the long tests, dealt in turn, longest
first, while the short ones even out the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def long_first(items: Sequence[T], workers: int, seconds: Callable[[T], float], default: float) -> list[T]:
    """`items` in the order to run them on `workers` workers; a long one is one whose `seconds`
    exceed `default`. Each group keeps the collection's order, so every worker computes the same."""
    long = sorted((i for i in items if seconds(i) > default), key=seconds, reverse=True)
    chosen = {id(i) for i in long}
    short = [i for i in items if id(i) not in chosen]
    ordered: list[T] = []
    left = len(items)
    for k in range(workers):  # the runs worksteal makes: what is left, shared by the workers left
        size = left // (workers - k)
        mine = long[k::workers]
        take = max(0, size - len(mine))
        ordered += mine + short[:take]
        short = short[take:]
        left -= size
    return ordered + short
