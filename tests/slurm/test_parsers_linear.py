"""Slurm's output is read in time linear in its size, whatever it holds (issue 33): the one-line
text format (`scontrol -o`), squeue's format, the JSON, and hostlists; and any text gets an answer
(parsed, or a clear error) within a budget, by property."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecars.slurm import hostlist, squeueformat, textformat
from tests.costs import superlinear

NODE = "NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 State=IDLE+DRAIN Partitions=p "


def _reading(read: Callable[[str], object]) -> Callable[[str], object]:
    def tolerant(text: str) -> object:
        try:
            return read(text)
        except ValueError as exc:  # a clear refusal is an answer too
            return exc

    return tolerant


SHAPES: dict[str, tuple[Callable[[int], str], Callable[[str], object]]] = {
    "words without =": (lambda n: NODE + "Reason=x " + "w " * (n // 2), textformat.nodes),
    "values glued on": (lambda n: NODE + "Comment=a " + "b " * (n // 2) + "Features=f", textformat.nodes),
    "a reason of spaces": (
        lambda n: NODE + "Reason=" + " " * n + "[root@2024-01-01T00:00:00]",
        textformat.nodes,
    ),
    "a reason of brackets": (lambda n: NODE + "Reason=" + "[" * n, textformat.nodes),
    "many short lines": (
        lambda n: "".join(f"NodeName=n{i} State=IDLE\n" for i in range(n // 24)),
        textformat.nodes,
    ),
    "one long key": (lambda n: "A" * n + "=1", textformat.config),
    "squeue, one long line": (lambda n: "1|" + "x" * n, _reading(squeueformat.job_summaries)),
    "hostlist of many parts": (lambda n: ",".join(f"n{i}" for i in range(n // 7)), _reading(hostlist.expand)),
    "hostlist of one long name": (lambda n: "n" * n + "[1-2]", _reading(hostlist.expand)),
    "hostlist of digits": (lambda n: "1" * n, _reading(hostlist.expand)),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_reading_slurms_output_costs_linear_in_its_size(shape: str) -> None:
    make, read = SHAPES[shape]
    assert superlinear(make, read, 50_000, 500_000) is None


@settings(max_examples=200, deadline=5000)  # a generous budget per example on a loaded machine
@given(st.text(alphabet=st.sampled_from(list("NodeName=RasonState IDLE[]@:-0129 \n,|()")), max_size=300))
def test_any_text_output_is_read_within_budget(text: str) -> None:
    textformat.nodes(text)
    textformat.jobs(text)
    textformat.config(text)


@settings(max_examples=200, deadline=5000)
@given(st.text(alphabet=st.sampled_from(list("n0123[]-,x ")), max_size=60))
def test_any_hostlist_is_expanded_or_refused_within_budget(expr: str) -> None:
    try:
        names = hostlist.expand(expr)
    except hostlist.HostlistError:
        return
    assert len(names) <= hostlist.MAX_NAMES
