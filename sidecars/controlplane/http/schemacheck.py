"""Requests checked against the very schemas /v1/openapi.json states, so the document and the server
cannot disagree: a constraint is written once, in the document, and enforced from there.

Only the JSON Schema keywords those schemas use are understood; a schema with any other is refused
at once (a keyword the server would silently skip is a promise it does not keep). Patterns are
anchored at both ends and matched as ECMA-262 matches them: `$` is the end of the string (Python's
`$` also matches before a final newline, so the pattern's body is matched with `fullmatch`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "default",
        "description",
        "oneOf",  # on objects, of alternatives that only name required properties
    }
)
# query strings: the JSON number grammar (no "inf", "nan", "1_0", " 1" or "+1", which float() takes)
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


class SchemaUnsupported(ValueError):
    """A schema uses a keyword this checker does not enforce (a programming error, not bad input)."""


def _matches(pattern: str, value: str) -> bool:
    if not (pattern.startswith("^") and pattern.endswith("$")):
        raise SchemaUnsupported(f"pattern {pattern!r} is not anchored at both ends")
    return re.fullmatch(pattern[1:-1], value) is not None


def problem(schema: Mapping[str, Any], value: object, where: str) -> str | None:
    """Why `value` does not fit `schema` (one sentence naming `where`), or None when it does."""
    unknown = set(schema) - KEYWORDS
    if unknown:
        raise SchemaUnsupported(f"{where}: schema keywords not enforced: {sorted(unknown)}")
    kind = schema.get("type")
    if kind == "object":
        return _object_problem(schema, value, where)
    if kind == "string":
        if not isinstance(value, str):
            return f"{where} must be a string"
        if len(value) < schema.get("minLength", 0):
            return f"{where} must be at least {schema['minLength']} characters"
        if len(value) > schema.get("maxLength", math.inf):
            return f"{where} must be at most {schema['maxLength']} characters"
        if "pattern" in schema and not _matches(schema["pattern"], value):
            return f"{where}: {schema.get('description') or 'must match ' + schema['pattern']}"
        return None
    if kind == "boolean":
        return None if isinstance(value, bool) else f"{where} must be true or false"
    if kind in ("integer", "number"):
        ok = isinstance(value, int) if kind == "integer" else isinstance(value, int | float)
        if isinstance(value, bool) or not ok:
            return f"{where} must be {'an integer' if kind == 'integer' else 'a number'}"
        assert isinstance(value, int | float)
        if value < schema.get("minimum", -math.inf) or value > schema.get("maximum", math.inf):
            return f"{where} must be between {schema.get('minimum')} and {schema.get('maximum')}"
        return None
    raise SchemaUnsupported(f"{where}: schema type {kind!r} not enforced")


def _object_problem(schema: Mapping[str, Any], value: object, where: str) -> str | None:
    if not isinstance(value, dict):
        return f"{where} must be a JSON object"
    props: Mapping[str, Any] = schema.get("properties", {})
    missing = [k for k in schema.get("required", []) if k not in value]
    if missing:
        return f"{where}: {', '.join(missing)} missing"
    if "oneOf" in schema:
        alternatives: list[list[str]] = []
        for alt in schema["oneOf"]:
            if set(alt) != {"required"}:
                raise SchemaUnsupported(f"{where}: oneOf alternatives other than a required list")
            alternatives.append(alt["required"])
        if sum(all(k in value for k in alt) for alt in alternatives) != 1:
            names = " or ".join("+".join(alt) for alt in alternatives)
            return f"{where}: give exactly one of {names}"
    if schema.get("additionalProperties", True) is not True:
        if schema["additionalProperties"] is not False:
            raise SchemaUnsupported(f"{where}: additionalProperties other than true or false")
        extra = sorted(set(value) - set(props))
        if extra:
            return f"{where}: unknown properties {', '.join(repr(k) for k in extra[:5])}"
    for name, sub in props.items():
        if name in value and (found := problem(sub, value[name], name)):
            return found
    return None


def with_defaults(schema: Mapping[str, Any], body: Mapping[str, Any]) -> dict[str, Any]:
    """`body` with the schema's default for each property it omits."""
    props: Mapping[str, Any] = schema.get("properties", {})
    return {**{k: s["default"] for k, s in props.items() if "default" in s}, **body}


def query_value(
    schema: Mapping[str, Any], raw: str, where: str
) -> tuple[int | float | str | None, str | None]:
    """A query parameter read as its schema's type, and why it does not fit (None when it does)."""
    kind = schema.get("type")
    grammar = {"integer": _INTEGER, "number": _NUMBER}.get(str(kind))
    if grammar is None:
        return raw, problem(schema, raw, where)
    if not grammar.fullmatch(raw) or len(raw) > 400:  # int() refuses 4300 digits; no version is that long
        return None, f"{where} must be {'an integer' if kind == 'integer' else 'a number'}"
    value: int | float = int(raw) if kind == "integer" else float(raw)
    return value, problem(schema, value, where)
