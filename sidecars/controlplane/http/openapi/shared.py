"""What the /v1/ OpenAPI documents share: a refusal's response, a JSON response by reference."""

from __future__ import annotations

from typing import Any

ERROR = {
    "description": "refused",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
DONE = {"description": "done", "content": {"application/json": {"schema": {"type": "object"}}}}


def refusals(*codes: int) -> dict[str, Any]:
    return {str(c): ERROR for c in codes}


def json_body(schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    """A request's JSON body."""
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def json_ref(ref: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": ref}}}}
