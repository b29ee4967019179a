"""A large JSON document is decoded item by item (so a thread decoding it hands the interpreter
lock to the event loop between items), and reads exactly as `json.loads` reads it: the same
document, or the same error where it is not JSON."""

from __future__ import annotations

import json

import pytest

from sidecars.runtime import limits
from sidecars.slurm import SlurmParseError, jsonformat
from tests.conftest import DATA

PAD = " " * limits.OFF_LOOP_CHARS  # past the size from which a document is decoded by item


def decoded(text: str) -> tuple[str, object]:
    try:
        return "doc", json.loads(text)
    except json.JSONDecodeError as exc:
        return "error", str(exc)


def by_item(text: str) -> tuple[str, object]:
    try:
        return "doc", jsonformat._decode_by_item(text)
    except json.JSONDecodeError as exc:
        return "error", str(exc)


@pytest.mark.parametrize(
    "text",
    [
        '{"nodes": [1, 2 , {"x": [1, [2]]}], "meta": {"a": 1}, "errors": [], "s": "]}"}\n',
        " { } ",
        '{"a": [], "b": [ ]}',
        '{"a": 1, "a": [2]}',  # a repeated key: the last one, as json.loads keeps it
        '{"a": [1, "\\u005d,"]}',
        "[1, 2]",
        '"nodes"',
        "",
        "   ",
        "\ufeff{}",
        '{"a": [1,]}',
        '{"a": 1,}',
        '{"a": [1] x',
        '{"a": 1} x',
        '{"a"',
        '{"a": [1',
        '{"a": [1 2]}',
        '{"a": 1 "b": 2}',
        "{1: 2}",
        '{"a": [{"b": }]}',
        "<html>",
    ],
)
def test_a_document_reads_as_json_loads_reads_it(text: str) -> None:
    assert by_item(text) == decoded(text)
    assert by_item(PAD + text + PAD) == decoded(PAD + text + PAD)


@pytest.mark.parametrize(
    ("release", "name", "key"),
    [
        ("22.05", "sinfo--json.json", "nodes"),
        ("22.05", "squeue--json.json", "jobs"),
        ("24.11", "scontrol-show-nodes--json.json", "nodes"),
        ("24.11", "scontrol-show-job--json.json", "jobs"),
        ("26.05", "scontrol-show-nodes--json.json", "nodes"),
        ("26.05", "scontrol-show-job--json.json", "jobs"),
    ],
)
def test_large_captured_documents_read_the_same(release: str, name: str, key: str) -> None:
    doc = json.loads((DATA / f"slurm-{release}" / name).read_text())
    doc[key] = doc[key] * 200
    text = json.dumps(doc, indent=1)
    assert len(text) >= limits.OFF_LOOP_CHARS
    assert jsonformat._decode_by_item(text) == doc
    assert jsonformat.load(["scontrol"], text, key) == doc[key]


def test_a_large_document_cut_short_fails_in_json_loads_words() -> None:
    text = json.dumps({"nodes": [{"name": f"n{i}"} for i in range(10_000)]})
    with pytest.raises(SlurmParseError, match=r"not JSON: Expecting .* \(char \d+\)"):
        jsonformat.load(["scontrol"], text[: len(text) // 2], "nodes")
