"""A failed Slurm command's text is classified in a few passes however long it is (issue 33: a
parse error that quotes a MiB line of the set was searched whole, on the event loop), and Slurm's
words about an unreachable controller are still found where Slurm puts them."""

from __future__ import annotations

from sidecars.slurm.errors import SlurmCommandError, SlurmUnreachable, classify
from tests.costs import cpu_seconds

MiB = 1 << 20
PASSES = 10  # a pass (str.lower) over a MiB is ~1 ms; the whole search cost ~70 of them
ARGV = ["scontrol", "--version"]


def test_a_mib_of_slurms_words_is_classified_in_a_few_passes() -> None:
    for word in ("K= ", "Abc", "SchedulerParameters=x "):
        text = 'scontrol: error: Parse error in file slurm.conf line 40: "' + word * (MiB // len(word)) + '"'
        one_pass = max(cpu_seconds(text.lower), 1e-4)
        cost = cpu_seconds(lambda t=text: classify(ARGV, 1, t))  # type: ignore[misc]
        assert cost <= PASSES * one_pass, f"{word!r}: {cost * 1000:.1f} ms, a pass {one_pass * 1000:.1f} ms"
        assert isinstance(classify(ARGV, 1, text), SlurmCommandError)


def test_an_unreachable_controller_is_still_told_at_either_end() -> None:
    said = "scontrol: error: Unable to contact slurm controller (connect failure)"
    noise = "x" * MiB
    assert isinstance(classify(ARGV, 1, said), SlurmUnreachable)
    assert isinstance(classify(ARGV, 1, said + "\n" + noise), SlurmUnreachable)
    assert isinstance(classify(ARGV, 1, noise + "\n" + said), SlurmUnreachable)
    assert isinstance(classify(ARGV, 1, "", said), SlurmUnreachable)  # stdout when stderr is empty
