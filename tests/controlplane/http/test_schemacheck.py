"""The server's checks are the document's schemas: every keyword a request schema uses is enforced."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sidecars.controlplane.http.openapi.document import REASON_BODY, REPORT_BODY, document
from sidecars.controlplane.http.schemacheck import (
    KEYWORDS,
    SchemaUnsupported,
    problem,
    query_value,
    with_defaults,
)


def _schemas(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield schema
    for sub in schema.get("properties", {}).values():
        yield from _schemas(sub)


def _request_schemas() -> Iterator[tuple[str, dict[str, Any]]]:
    for path, ops in document()["paths"].items():
        for method, op in ops.items():
            for p in op.get("parameters", []):
                yield f"{method} {path} {p['name']}", p["schema"]
            for media in op.get("requestBody", {}).get("content", {}).values():
                yield f"{method} {path} body", media["schema"]


def test_every_keyword_of_every_request_schema_is_one_the_server_enforces() -> None:
    seen = list(_request_schemas())
    assert len(seen) >= 8  # name on five paths, version, wait, three bodies
    for where, schema in seen:
        for s in _schemas(schema):
            assert set(s) <= KEYWORDS, (where, set(s) - KEYWORDS)


def test_unenforceable_schemas_are_refused_not_skipped() -> None:
    with pytest.raises(SchemaUnsupported):
        problem({"type": "string", "format": "email"}, "a", "x")
    with pytest.raises(SchemaUnsupported):
        problem({"type": "string", "pattern": "^a"}, "a", "x")  # unanchored
    with pytest.raises(SchemaUnsupported):
        problem({"type": "array"}, [], "x")


def test_patterns_match_as_the_document_means_them() -> None:
    name = {"type": "string", "pattern": "^[a-z]+$"}
    assert problem(name, "abc", "n") is None
    assert problem(name, "abc\n", "n") is not None  # ECMA's `$` is the end; Python's allows a newline
    reason = REASON_BODY["properties"]["reason"]
    for bad in ("slurm-sidecars: a\x85b", "slurm-sidecars: a\u2028b", "slurm-sidecars: \x7f", "maint: x"):
        assert problem(reason, bad, "reason") is not None, bad
    assert problem(reason, "slurm-sidecars: ünïcode is fine", "reason") is None


def test_bodies_get_their_defaults_and_lose_nothing() -> None:
    assert with_defaults(REASON_BODY, {})["reason"].startswith("slurm-sidecars:")
    assert with_defaults(REASON_BODY, {"reason": "slurm-sidecars: x"}) == {"reason": "slurm-sidecars: x"}
    body = {"pod_namespace": "s", "pod_name": "p", "registered": False}
    assert problem(REPORT_BODY, body, "body") is None
    assert with_defaults(REPORT_BODY, body) == {**body, "detail": ""}


@pytest.mark.parametrize(
    ("raw", "value", "ok"),
    [
        ("0", 0, True),
        ("12", 12, True),
        ("-1", -1, False),
        ("1.5", None, False),
        (" 1", None, False),
        ("+1", None, False),
        ("1_0", None, False),
        ("9" * 500, None, False),
    ],
)
def test_integer_query_values_follow_the_json_grammar(raw: str, value: int | None, ok: bool) -> None:
    got, refused = query_value({"type": "integer", "minimum": 0}, raw, "version")
    assert (refused is None) == ok
    if value is not None:
        assert got == value


@pytest.mark.parametrize("raw", ["inf", "nan", "1e", ".5", "5.", "0x10", "1e400x"])
def test_number_query_values_follow_the_json_grammar(raw: str) -> None:
    assert query_value({"type": "number", "minimum": 0}, raw, "wait")[1] is not None


def test_one_of_its_alternatives_of_required_properties() -> None:
    schema = {
        "type": "object",
        "oneOf": [{"required": ["revision"]}, {"required": ["deployment"]}],
        "properties": {"revision": {"type": "string"}, "deployment": {"type": "string"}},
    }
    assert problem(schema, {"revision": "a"}, "body") is None
    assert problem(schema, {"deployment": "w"}, "body") is None
    for both_or_none in ({}, {"revision": "a", "deployment": "w"}):
        assert problem(schema, both_or_none, "body") == "body: give exactly one of revision or deployment"
    with pytest.raises(SchemaUnsupported):
        problem({"type": "object", "oneOf": [{"type": "object"}]}, {}, "x")
