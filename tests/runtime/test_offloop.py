"""Work over a large text runs off the event loop without holding it (issue 33). A thread shares the
loop's interpreter lock: two CPU-bound threads at once, the cyclic collector walking what a parse
built, or one C call over a MiB line each held config-sync's loop past 100 ms with no CPU on the
loop's thread (`K= ` * 350,000: 115-161 ms). So sized work runs one at a time, with the collector
paused, and long lines reach a C call in pieces (runtime.offloop, runtime.textcuts)."""

from __future__ import annotations

import asyncio
import gc
import re
import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecars.configsync.fileset import conffile
from sidecars.runtime import limits, offloop, textcuts
from sidecars.runtime.looplag import INTERVAL_SECONDS

MiB = 1 << 20
# how long the first work waits for a second to run beside it: many times what a thread's start
# takes on a loaded machine (ms), so a second work that could run beside it shows; with the lane
# it only delays the second work this long
BESIDE_SECONDS = 20 * INTERVAL_SECONDS
# hypothesis's budget for one example, in ms (each is microseconds of work): a loaded machine's pauses
EXAMPLE_BUDGET_MS = 5000


async def test_sized_works_run_one_at_a_time() -> None:
    first_in, second_in = threading.Event(), threading.Event()
    beside: list[bool] = []

    def first() -> None:
        first_in.set()
        beside.append(second_in.wait(BESIDE_SECONDS))

    one = asyncio.create_task(offloop.sized(limits.OFF_LOOP_CHARS, first))
    await asyncio.to_thread(first_in.wait)
    two = asyncio.create_task(offloop.sized(limits.OFF_LOOP_CHARS, second_in.set))
    await one
    await two
    assert beside == [False], "a second sized work ran while the first held the lane"
    assert second_in.is_set()


async def test_sized_work_runs_with_the_collector_paused() -> None:
    seen = await offloop.sized(limits.OFF_LOOP_CHARS, gc.isenabled)
    assert seen is False, "the cyclic collector ran during sized work: each full pass holds the loop"
    assert gc.isenabled()  # and resumes after it


async def test_a_failing_sized_work_frees_the_lane() -> None:
    def broken() -> None:
        raise ValueError("bad set")

    with pytest.raises(ValueError, match="bad set"):
        await offloop.sized(limits.OFF_LOOP_CHARS, broken)
    assert await offloop.sized(limits.OFF_LOOP_CHARS, lambda: "next") == "next"
    assert gc.isenabled()


class Recorded:
    """A pattern that records the length of each text split with it (each one C call)."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.lengths: list[int] = []

    def split(self, text: str) -> list[str]:
        self.lengths.append(len(text))
        return self.pattern.split(text)


@pytest.mark.parametrize(
    ("line", "words"),
    [("K= " * (MiB // 3), ["K="] * (MiB // 3)), ("Abc" * (MiB // 3), ["Abc" * (MiB // 3)])],
    ids=["keys without values", "one MiB word"],
)
def test_a_mib_line_reaches_the_split_in_pieces(
    line: str, words: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = Recorded(conffile._BLANKS)
    monkeypatch.setattr(conffile, "_BLANKS", recorded)
    assert conffile.words(line) == words
    assert max(recorded.lengths) <= textcuts.CUT_CHARS, "a MiB line in one C call"


BLANKS = re.compile(r"[ \t\r\n]+")


@settings(max_examples=400, deadline=EXAMPLE_BUDGET_MS)
@given(st.text(alphabet=" \t\nab=", max_size=80), st.integers(1, 9))
def test_split_runs_splits_as_one_split_does(text: str, cut: int) -> None:
    assert textcuts.split_runs(text, BLANKS, cut) == [w for w in BLANKS.split(text) if w]


@settings(max_examples=400, deadline=EXAMPLE_BUDGET_MS)
@given(st.text(alphabet="#\\a ", max_size=40))
def test_find_unescaped_finds_what_the_lookbehind_finds(text: str) -> None:
    m = re.search(r"(?<!\\)#", text)
    assert textcuts.find_unescaped(text, "#") == (-1 if m is None else m.start())


@pytest.mark.parametrize(
    "line",
    ["K= " * 1000 + "# c", "a\\#b # c", "#x", "NodeName=n1 CPUs=2", "x" * 100_000 + " y=1"],
)
def test_words_and_comments_read_as_before(line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = textcuts.split_runs
    small: Callable[..., Any] = lambda text, sep: real(text, sep, 7)  # noqa: E731
    whole = conffile.words(conffile.strip_comment(line))
    monkeypatch.setattr(textcuts, "split_runs", small)
    assert conffile.words(conffile.strip_comment(line)) == whole
