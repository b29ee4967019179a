"""A request's JSON body, bounded and checked against the schema the OpenAPI document states."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from sidecars.controlplane.http.errors import error
from sidecars.controlplane.http.openapi.document import MAX_BODY
from sidecars.controlplane.http.schemacheck import problem, with_defaults


def _not_json(word: str) -> None:
    raise ValueError(f"{word} is not JSON")  # json.loads takes NaN and Infinity otherwise


async def read_body(request: web.Request, schema: dict[str, Any]) -> dict[str, Any] | web.Response:
    """The JSON body checked against `schema` (422 when it does not fit), its defaults filled in;
    an empty body is `{}`."""
    if request.content_length is not None and request.content_length > MAX_BODY:
        return error(413, f"request body larger than {MAX_BODY} bytes")
    raw = await request.read()
    if len(raw) > MAX_BODY:
        return error(413, f"request body larger than {MAX_BODY} bytes")
    try:
        body = json.loads(raw or b"{}", parse_constant=_not_json)
        json.dumps(body, ensure_ascii=False).encode()  # a lone surrogate (\ud800) is no text
    except (ValueError, UnicodeError, RecursionError):
        return error(400, "body is not valid JSON")
    refused = problem(schema, body, "body")
    if refused:
        return error(422, refused)
    return with_defaults(schema, body)
