"""A daemon's last words as the upgrade quotes them: its fatal after the error that caused it, else
its last two errors, bounded and redacted, with Slurm's own stamp as the time."""

from __future__ import annotations

from datetime import datetime

from sidecars.slurm.lastwords import WORDS_CHARS, last_words

LOG = """\
[2026-12-06T04:19:50.100] slurmctld version 26.05.5 started on cluster dev
[2026-12-06T04:19:50.110] error: Database settings not recommended values: innodb_buffer_pool_size
[2026-12-06T04:19:50.112] some line between
[2026-12-06T04:19:50.113] some other line
[2026-12-06T04:19:50.114] and one more
[2026-12-06T04:19:50.115] error: cannot find topology plugin for topology/nosuch
[2026-12-06T04:19:50.116] fatal: Failed to initialize topology plugin
"""


def test_the_fatal_after_the_error_just_before_it_stamped_by_slurm() -> None:
    said = last_words(LOG)
    assert said.line == (
        "error: cannot find topology plugin for topology/nosuch; fatal: Failed to initialize topology plugin"
    )
    assert said.logged_at == datetime(2026, 12, 6, 4, 19, 50, 116000).timestamp()  # local time, as written
    # an error far before the fatal is not its cause
    far = LOG.replace(
        "[2026-12-06T04:19:50.115] error: cannot find topology plugin for topology/nosuch\n", ""
    )
    assert last_words(far).line == "fatal: Failed to initialize topology plugin"


def test_without_a_fatal_the_last_two_errors_else_the_last_line() -> None:
    text = "error: a\nerror: cannot create proctrack context\nnoise\nerror: slurmd initialization failed\n"
    said = last_words(text)
    assert said.line == "error: cannot create proctrack context; error: slurmd initialization failed"
    assert said.logged_at is None
    assert last_words("first\nSegmentation fault\n\n").line == "Segmentation fault"
    assert last_words("").line == ""


def test_bounded_the_fatal_kept_whole_and_secrets_redacted() -> None:
    long = "error: " + "x" * 1000 + "\nfatal: StoragePass=hunter22 refused\n"
    said = last_words(long)
    assert len(said.line) <= WORDS_CHARS
    # an unquoted secret value is hidden to the line's end (every word of it: runtime.redact)
    assert said.line.endswith("fatal: StoragePass=<redacted>")
    assert "hunter22" not in said.line
    assert len(last_words("fatal: " + "y" * 5000).line) == WORDS_CHARS
