"""Redaction's rules (runtime.redact) beyond the secret-named keys: a URL's password, every word of
an unquoted secret value, a cut log field that never shows part of a secret, and the cost of all of
it linear in the text (a 1 MiB word held config-sync for minutes, issue 33)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecars.configsync.fileset.secretvalues import values_of
from sidecars.configsync.fileset.sources import FileEntry
from sidecars.runtime import limits
from sidecars.runtime.events import RedactingEventSink
from sidecars.runtime.redact import PLACEHOLDERS, REDACTED, Redactor, redact, secret_pairs
from tests.costs import superlinear
from tests.helpers import RecordingEvents


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (
            "JobCompLoc=http://user:pw-url-1@db.example:8086/slurm",
            f"JobCompLoc=http://user:{REDACTED}@db.example:8086/slurm",
        ),
        ("peer https://:pw-url-2@ctl-0 answered", f"peer https://:{REDACTED}@ctl-0 answered"),
        ("AccountingStoragePass=correct horse battery", f"AccountingStoragePass={REDACTED}"),
        ("StoragePass = two words # why", f"StoragePass = {REDACTED}"),
        ("JobCompPass=two words JobCompUser=me", f"JobCompPass={REDACTED} JobCompUser=me"),
        (
            "-AccountingStoragePass=old\n+AccountingStoragePass=new\n",
            f"-AccountingStoragePass={REDACTED}\n+AccountingStoragePass={REDACTED}\n",
        ),
        ("JobCompLoc=http://db.example/slurm", "JobCompLoc=http://db.example/slurm"),
    ],
)
def test_url_passwords_and_every_word_of_a_value_are_hidden(line: str, shown: str) -> None:
    assert redact(line) == shown


def test_the_values_learnt_include_every_word_and_the_url_password() -> None:
    text = "StoragePass=correct horse battery\nJobCompLoc=http://u:pw-url-3@h/x\n"
    assert set(secret_pairs(text)) >= {"correct horse battery", "correct", "horse", "battery", "pw-url-3"}
    entry = FileEntry("slurm.conf", text.encode(), 0o644, len(text), None)  # type: ignore[arg-type]
    assert "pw-url-3" in set(values_of(entry, whole=False))


def test_a_cut_log_field_never_shows_part_of_a_secret() -> None:
    secret = "s3cret-" * 1000
    redactor = Redactor(lambda: (secret,))
    # the secret starts just before the cut and runs far past it
    text = "x" * (limits.LOG_FIELD_CHARS - 3) + secret + "tail"
    out = redactor.text(text, limits.LOG_FIELD_CHARS)
    assert "s3c" not in out and REDACTED in out and "more characters not shown" in out
    assert len(out) < limits.LOG_FIELD_CHARS + 100
    assert out.endswith(
        f"... ({len(text) - (limits.LOG_FIELD_CHARS - 3 + len(secret))} more characters not shown)"
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "#" + "x" * n + "\nClusterName=c\n",  # one word and an `=` elsewhere
        lambda n: "a-" * (n // 2) + "=",  # a run of key characters, `-` between
        lambda n: "Key=" * (n // 4),  # keys without values
        lambda n: "AccountingStoragePass=" + "p" * n,  # a secret value with no end
        lambda n: 'JobCompPass="' + "q" * n,  # an unterminated quote
        lambda n: "JobCompLoc=http://u:" + ":" * n,  # a URL whose password never ends
        lambda n: "AccountingStoragePass=a " * (n // 24),  # many secret pairs on one line
    ],
)
def test_redaction_costs_grow_linearly(make: Callable[[int], str]) -> None:
    known = tuple(f"value-{i:04d}" for i in range(200))
    redactor = Redactor(lambda: known)
    assert superlinear(make, lambda text: (redactor.text(text), list(secret_pairs(text)))) is None


async def test_an_events_message_is_cut_and_redacted() -> None:
    inner = RecordingEvents()
    sink = RedactingEventSink(inner, Redactor(lambda: ("pw-event-1",)))
    await sink.emit("ConfigRejected", "slurm.conf: pw-event-1 " + "x" * (1 << 20), "Warning")
    ((_, message, _),) = inner.events
    assert "pw-event-1" not in message and REDACTED in message
    assert len(message) < limits.EVENT_MESSAGE_CHARS + 100 and "more characters not shown" in message


@settings(max_examples=300, deadline=5000)  # a generous budget per example on a loaded machine
@given(
    st.text(alphabet=st.sampled_from(list("P=s :/@\"'\n-#xK")), max_size=200),  # none of the secret's
    st.text(alphabet=st.sampled_from(list("abcXYZ019")), min_size=4, max_size=12),
    st.integers(0, 250),
)
def test_no_known_value_survives_any_text_or_cut(text: str, secret: str, limit: int) -> None:
    redactor = Redactor(lambda: (secret,))
    mixed = text[: len(text) // 2] + secret + text[len(text) // 2 :]
    assert secret not in redactor.text(mixed)
    cut = redactor.text(mixed, limit)
    assert secret not in cut and secret[: max(4, len(secret) - 1)] not in cut


@settings(max_examples=300, deadline=5000)
@given(st.text(alphabet=st.sampled_from(list('AccountingStoragePass= word\n"x')), max_size=200))
def test_a_secret_pairs_value_is_never_shown(text: str) -> None:
    shown = redact(text)
    for value in secret_pairs(text):
        # a value also written outside its pair (a plain word elsewhere) is not the pattern's to hide
        if len(value) >= 4 and value not in PLACEHOLDERS and value.strip() and text.count(value) == 1:
            assert value not in shown.replace(REDACTED, "\0"), (text, value, shown)
