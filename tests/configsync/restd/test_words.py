"""slurmrestd's words, read from its container's output file after a mark: only what came after it,
a file started anew read from its start, the prefixes cut, the errors before the fatal line kept,
capped; a start line told apart from a refusal."""

from __future__ import annotations

from pathlib import Path

from sidecars.configsync.restd import words

REFUSAL_26 = (
    "[2026-12-06T16:58:30.255] error: Invalid user for SlurmUser nobody, ignored\n"
    "[2026-12-06T16:58:30.255] fatal: Unable to process configuration file\n"
)


def test_only_what_came_after_the_mark_is_read(tmp_path: Path) -> None:
    log = tmp_path / "slurmrestd.log"
    log.write_text(f"{words.STARTING}\n{REFUSAL_26}")  # an earlier start's refusal
    mark = words.mark(log)
    assert words.since(log, mark) == words.Since(False, None)
    with open(log, "a") as f:
        f.write(f"{words.STARTING}\n")
    assert words.since(log, mark) == words.Since(True, None)  # started, not refused (yet)
    with open(log, "a") as f:
        f.write("slurmrestd: fatal: slurmrestd should not be run with SlurmUser's group.\n")
    assert words.since(log, mark) == words.Since(
        True, "fatal: slurmrestd should not be run with SlurmUser's group."
    )


def test_the_errors_before_the_fatal_line_are_its_reason(tmp_path: Path) -> None:
    log = tmp_path / "slurmrestd.log"
    log.write_text("x" * 1000)
    mark = words.mark(log)
    log.write_text(REFUSAL_26)  # started anew, shorter than the mark: read from its start
    said = words.since(log, mark)
    assert said.refused == (
        "error: Invalid user for SlurmUser nobody, ignored; fatal: Unable to process configuration file"
    )


def test_no_file_and_long_words(tmp_path: Path) -> None:
    log = tmp_path / "none.log"
    assert words.mark(log) == 0
    assert words.since(log, 0) == words.Since(False, None)
    assert words.since(None, 0) == words.Since(False, None)
    log.write_text("fatal: " + "y" * 5000 + "\n")
    said = words.since(log, 0).refused
    assert said is not None and len(said) == words.MAX_WORDS
