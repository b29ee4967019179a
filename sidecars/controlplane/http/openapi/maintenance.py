"""The OpenAPI 3 paths and schemas of /v1/maintenance (merged into openapi.document())."""

from __future__ import annotations

from typing import Any

from sidecars.controlplane.http.openapi.shared import json_body, json_ref, refusals

_WINDOW_PARAM = {
    "name": "window",
    "in": "path",
    "required": True,
    "description": "maintenance window name",
    "schema": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,62}$"},
}


def schemas() -> dict[str, Any]:
    return {
        "MaintenanceWindow": {
            "type": "object",
            "required": ["name", "nodes", "start", "end", "reason", "source", "active", "node_states"],
            "properties": {
                "name": {"type": "string"},
                "nodes": {"type": "array", "items": {"type": "string"}},
                "start": {"type": "string", "format": "date-time"},
                "end": {"type": "string", "format": "date-time"},
                "reason": {"type": "string"},
                "source": {"type": "string", "enum": ["api", "kubernetes"]},
                "active": {"type": "boolean", "description": "start <= now < end"},
                "reservation": {"type": "string", "description": "the Slurm reservation holding it"},
                "node_states": {
                    "type": "object",
                    "description": "per node: state (scheduled, waiting, draining, ready, unknown) and "
                    "detail, e.g. `waiting for job 123 (ends 14:05)`",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {"state": {"type": "string"}, "detail": {"type": "string"}},
                    },
                },
            },
        },
        "MaintenanceRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["nodes", "start", "duration", "reason"],
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,62}$"},
                "nodes": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 4096,
                    "pattern": "^[A-Za-z0-9._,\\[\\]-]+$",
                    "description": "Slurm hostlist, e.g. gpu[01-04]",
                },
                "start": {
                    "type": "string",
                    "minLength": 3,
                    "description": "`now` or RFC 3339 with an offset; not in the past (409 when it is)",
                },
                "duration": {
                    "type": "string",
                    "minLength": 2,
                    "pattern": "^([0-9]+d)?([0-9]+h)?([0-9]+m)?$",
                    "description": "e.g. 90m, 1h30m, 1d",
                },
                "reason": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 200,
                    "description": "no `=` (409 when it has one); kept as the reservation's comment",
                },
            },
        },
    }


def paths() -> dict[str, Any]:
    window = "#/components/schemas/MaintenanceWindow"
    return {
        "/v1/maintenance": {
            "get": {
                "summary": "every maintenance window, read from Slurm's reservations, with a report per node",
                "responses": {
                    "200": {
                        "description": "windows",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {"windows": {"type": "array", "items": {"$ref": window}}},
                                }
                            }
                        },
                    },
                    **refusals(401, 503),
                },
            },
            "post": {
                "summary": "create a window: a MAINT reservation now, drains from its start as jobs end",
                "requestBody": json_body(schemas()["MaintenanceRequest"]),
                "responses": {
                    "201": json_ref(window, "created"),
                    **refusals(400, 401, 409, 413, 422, 503),
                },
            },
        },
        "/v1/maintenance/{window}": {
            "get": {
                "summary": "one window",
                "parameters": [_WINDOW_PARAM],
                "responses": {"200": json_ref(window, "the window"), **refusals(400, 401, 404, 503)},
            },
            "delete": {
                "summary": "end a window now: its reservation removed, its drains (ours only) undone",
                "parameters": [_WINDOW_PARAM],
                "responses": {"200": {"description": "deleted"}, **refusals(400, 401, 404, 409, 503)},
            },
        },
    }
