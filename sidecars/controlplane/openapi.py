"""The OpenAPI 3 description of /v1/ (served at /v1/openapi.json; the API fuzz test is generated from it)."""

from __future__ import annotations

from typing import Any

from sidecars.controlplane import openapi_maintenance

_ERROR = {
    "description": "refused",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_NAME_PARAM = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "Slurm node name",
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$"},
}
_REASON_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["reason"],
                "properties": {
                    "reason": {
                        "type": "string",
                        "pattern": "^slurm-sidecars:",
                        "maxLength": 256,
                        "description": "Slurm reason; must start with `slurm-sidecars:`",
                    }
                },
            }
        }
    },
}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): _ERROR for c in codes}


def document() -> dict[str, Any]:
    node = {
        "type": "object",
        "required": ["name", "state", "flags", "reason", "jobs", "busy_until"],
        "properties": {
            "name": {"type": "string"},
            "state": {"type": "string", "description": "base state, e.g. IDLE, ALLOCATED, MIXED, DOWN"},
            "flags": {
                "type": "array",
                "items": {"type": "string"},
                "description": "e.g. DRAIN, NOT_RESPONDING, COMPLETING",
            },
            "reason": {"type": "string", "nullable": True},
            "jobs": {"type": "array", "items": {"type": "integer"}, "description": "running job ids"},
            "busy_until": {
                "type": "integer",
                "nullable": True,
                "description": "epoch seconds when its running work ends at the latest "
                "(253402300799 for unlimited work); null when idle",
            },
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "slurm-sidecars control plane",
            "version": "1",
            "description": "The fleet view of one Slurm cluster, read once per interval, and the "
            "writes the worker agents need. Every /v1/ path needs "
            "`Authorization: Bearer <token>`.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Node": node,
                "VersionedNode": {
                    "allOf": [
                        {"$ref": "#/components/schemas/Node"},
                        {
                            "type": "object",
                            "required": ["version"],
                            "properties": {"version": {"type": "integer", "description": "snapshot version"}},
                        },
                    ]
                },
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {"error": {"type": "string"}},
                },
                **openapi_maintenance.schemas(),
            },
        },
        "security": [{"bearer": []}],
        "paths": {
            "/v1/nodes": {
                "get": {
                    "summary": "every node of the cluster",
                    "responses": {
                        "200": {
                            "description": "nodes",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "array",
                                        "items": {"$ref": "#/components/schemas/Node"},
                                    }
                                }
                            },
                        },
                        **_errors(401, 503),
                    },
                }
            },
            "/v1/nodes/{name}": {
                "get": {
                    "summary": "one node; with version and wait, a long poll held until the snapshot version "
                    "differs from `version` or `wait` seconds pass",
                    "parameters": [
                        _NAME_PARAM,
                        {"name": "version", "in": "query", "required": False, "schema": {"type": "integer"}},
                        {
                            "name": "wait",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "number", "minimum": 0, "maximum": 60},
                            "description": "seconds, capped at the server's maximum (60 by default)",
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "the node",
                            "content": {
                                "application/json": {"schema": {"$ref": "#/components/schemas/VersionedNode"}}
                            },
                        },
                        **_errors(400, 401, 404, 503),
                    },
                }
            },
            "/v1/nodes/{name}/drain": {
                "post": {
                    "summary": "drain the node (queued into the next batched scontrol call)",
                    "parameters": [_NAME_PARAM],
                    "requestBody": _REASON_BODY,
                    "responses": {"202": {"description": "queued"}, **_errors(400, 401, 404, 413, 422, 503)},
                }
            },
            "/v1/nodes/{name}/undrain": {
                "post": {
                    "summary": "clear the drain, only when the node's current reason is exactly this one",
                    "parameters": [_NAME_PARAM],
                    "requestBody": _REASON_BODY,
                    "responses": {"202": {"description": "queued"}, **_errors(400, 401, 404, 413, 422, 503)},
                }
            },
            "/v1/nodes/{name}/report": {
                "post": {
                    "summary": "an agent reports whether its slurmd is registered (input to recycling)",
                    "parameters": [_NAME_PARAM],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["pod_namespace", "pod_name", "registered"],
                                    "properties": {
                                        "pod_namespace": {"type": "string"},
                                        "pod_name": {"type": "string"},
                                        "registered": {"type": "boolean"},
                                        "detail": {"type": "string", "maxLength": 1024},
                                    },
                                }
                            }
                        },
                    },
                    "responses": {"204": {"description": "recorded"}, **_errors(400, 401, 413, 422)},
                }
            },
            "/v1/scale-in-order": {
                "get": {
                    "summary": "node names, first to remove first (idle, then soonest busy_until)",
                    "responses": {
                        "200": {
                            "description": "names",
                            "content": {
                                "application/json": {"schema": {"type": "array", "items": {"type": "string"}}}
                            },
                        },
                        **_errors(401, 503),
                    },
                }
            },
            **openapi_maintenance.paths(),
            "/v1/openapi.json": {
                "get": {
                    "summary": "this document",
                    "responses": {"200": {"description": "OpenAPI 3"}, **_errors(401)},
                }
            },
        },
    }
