"""The OpenAPI 3 description of /v1/ (served at /v1/openapi.json; the API fuzz test is generated from it).

The request schemas here are the server's rules too (`schemacheck` enforces them as written), so
every constraint is stated once. Patterns are anchored at both ends.
"""

from __future__ import annotations

from typing import Any

from sidecars.controlplane.http.access import roles
from sidecars.controlplane.http.openapi import maintenance as openapi_maintenance
from sidecars.controlplane.http.openapi import upgrade as openapi_upgrade
from sidecars.controlplane.http.openapi.shared import ERROR, json_body, refusals
from sidecars.protocol.drains import REASON_PREFIX

MAX_BODY = 16 * 1024
NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$"  # Slurm node names, Kubernetes names
# no control characters (C0, DEL, C1) nor Unicode line breaks: the reason is one line in Slurm's
# `scontrol -o` output, which we read back (Python's splitlines() breaks at \x85, \u2028, \u2029)
REASON_PATTERN = "^" + REASON_PREFIX + r"[^\x00-\x1f\x7f-\x9f\u2028\u2029]*$"
MAX_REASON = 256
DEFAULT_REASON = f"{REASON_PREFIX} drain requested through the control plane API"
MAX_DETAIL = 1024
MAX_VERSION = 2**63 - 1
SLURM_RELEASE_PATTERN = "^[0-9]{2}\\.[0-9]{2}(\\.[0-9]+)?$"

NAME_PARAM: dict[str, Any] = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "Slurm node name",
    "schema": {"type": "string", "pattern": NAME_PATTERN, "description": "a Slurm node name"},
}
VERSION_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": MAX_VERSION}
REASON_BODY: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "reason": {
            "type": "string",
            "pattern": REASON_PATTERN,
            "maxLength": MAX_REASON,
            "default": DEFAULT_REASON,
            "description": f"the Slurm reason: starts with `{REASON_PREFIX}`, one line without "
            "control characters; an undrain clears only a drain with exactly this reason",
        }
    },
}
REPORT_BODY: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["pod_namespace", "pod_name"],
    "properties": {
        "pod_namespace": {"type": "string", "pattern": NAME_PATTERN, "description": "a Kubernetes name"},
        "pod_name": {"type": "string", "pattern": NAME_PATTERN, "description": "a Kubernetes name"},
        "registered": {
            "type": "boolean",
            "description": "a registration report (absent: the report says nothing about it)",
        },
        "detail": {"type": "string", "maxLength": MAX_DETAIL, "default": ""},
        "slurmd_version": {
            "type": "string",
            "pattern": SLURM_RELEASE_PATTERN,
            "description": "the release of the binary the node's slurmd runs (`slurmd -V`), for the "
            "upgrade's version skew guard",
        },
    },
}


# no maximum: a longer wait is not refused but cut to the server's cap (an agent polling less often
# than the control plane allows keeps its long poll instead of falling back to asking Slurm)
WAIT_SCHEMA: dict[str, Any] = {"type": "number", "minimum": 0}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


_QUEUED = {
    "description": "queued",
    "content": _json(
        {
            "type": "object",
            "required": ["node", "action", "queued"],
            "properties": {
                "node": {"type": "string"},
                "action": {"type": "string", "enum": ["drain", "undrain"]},
                "queued": {"type": "boolean"},
            },
        }
    ),
}


def _drain_request(summary: str) -> dict[str, Any]:
    """A drain or an undrain: one shape, an optional reason in, queued out."""
    return {
        "post": {
            "summary": summary,
            "parameters": [NAME_PARAM],
            "requestBody": json_body(REASON_BODY, required=False),
            "responses": {"202": _QUEUED, **refusals(400, 401, 404, 413, 422, 503)},
        }
    }


def document(max_wait: float = 60.0) -> dict[str, Any]:
    """The document for a server whose long polls are capped at `max_wait` seconds."""
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
    return _secured(
        {
            "openapi": "3.0.3",
            "info": {
                "title": "slurm-sidecars control plane",
                "version": "1",
                "description": "The fleet view of one Slurm cluster, read once per interval, and the "
                "writes the worker agents need. Every /v1/ path needs `Authorization: Bearer <token>` "
                "of one of three identities (`securitySchemes`); each operation names those it admits. "
                "An agent acts on its own node only: any other node is 403.",
            },
            "components": {
                "securitySchemes": SECURITY_SCHEMES,
                "schemas": {
                    "Node": node,
                    "VersionedNode": {
                        "allOf": [
                            {"$ref": "#/components/schemas/Node"},
                            {
                                "type": "object",
                                "required": ["version"],
                                "properties": {
                                    "version": {"type": "integer", "description": "snapshot version"}
                                },
                            },
                        ]
                    },
                    "Error": {
                        "type": "object",
                        "required": ["error"],
                        "properties": {
                            "error": {"type": "string"},
                            "node": {"type": "string", "description": "a 404 about a node: its name"},
                            "slurm": {
                                "type": "string",
                                "enum": ["no_record"],
                                "description": "a 404 about a node: Slurm has no record of it",
                            },
                        },
                    },
                    **openapi_maintenance.schemas(),
                    **openapi_upgrade.schemas(),
                },
            },
            "paths": {
                "/v1/nodes": {
                    "get": {
                        "summary": "every node of the cluster",
                        "responses": {
                            "200": {
                                "description": "nodes",
                                "content": _json(
                                    {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}
                                ),
                            },
                            **refusals(401, 503),
                        },
                    }
                },
                "/v1/nodes/{name}": {
                    "get": {
                        "summary": "one node; with version and wait, a long poll held until the snapshot "
                        "version differs from `version` or `wait` seconds pass",
                        "parameters": [
                            NAME_PARAM,
                            {"name": "version", "in": "query", "required": False, "schema": VERSION_SCHEMA},
                            {
                                "name": "wait",
                                "in": "query",
                                "required": False,
                                "schema": WAIT_SCHEMA,
                                "description": "seconds to hold the answer; a wait longer than this "
                                f"server's --max-wait-seconds ({max_wait:g}) is cut to it",
                            },
                        ],
                        "responses": {
                            "200": {
                                "description": "the node",
                                "content": _json({"$ref": "#/components/schemas/VersionedNode"}),
                            },
                            **refusals(400, 401, 404, 503),
                        },
                    }
                },
                "/v1/nodes/{name}/drain": _drain_request(
                    "drain the node (queued into the next batched scontrol call)"
                ),
                "/v1/nodes/{name}/undrain": _drain_request(
                    "clear the drain, only when the node's current reason is exactly this one"
                ),
                "/v1/nodes/{name}/report": {
                    "post": {
                        "summary": "an agent reports whether its slurmd is registered (input to recycling)",
                        "parameters": [NAME_PARAM],
                        "requestBody": json_body(REPORT_BODY),
                        "responses": {"204": {"description": "recorded"}, **refusals(400, 401, 413, 422)},
                    }
                },
                "/v1/scale-in-order": {
                    "get": {
                        "summary": "node names, first to remove first (idle, then soonest busy_until)",
                        "responses": {
                            "200": {
                                "description": "names",
                                "content": _json({"type": "array", "items": {"type": "string"}}),
                            },
                            **refusals(401, 503),
                        },
                    }
                },
                **openapi_upgrade.paths(),
                **openapi_maintenance.paths(),
                "/v1/openapi.json": {
                    "get": {
                        "summary": "this document",
                        "responses": {
                            "200": {"description": "OpenAPI 3", "content": _json({"type": "object"})},
                            **refusals(401),
                        },
                    }
                },
            },
        }
    )


SECURITY_SCHEMES: dict[str, Any] = {
    "operator": {
        "type": "http",
        "scheme": "bearer",
        "description": "the operator's token (--token-file): every operation, on every node",
    },
    "viewer": {
        "type": "http",
        "scheme": "bearer",
        "description": "the read-only token (--viewer-token-file): every GET, nothing else",
    },
    "agent": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "a worker pod's projected ServiceAccount token for the audience of "
        "--agent-audience (slurm-sidecars), checked by TokenReview: reads, drains, undrains and "
        "reports its own node only (the node its pod holds)",
    },
}


def _secured(doc: dict[str, Any]) -> dict[str, Any]:
    """Each operation's `security` (access.roles) and the refusals every one of them can meet: 403
    (an identity it does not admit, or another node's), 503 (a token that cannot be reviewed now)."""
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            op["security"] = [{role: []} for role in roles(method, path)]
            for code in ("401", "403", "503"):
                op["responses"].setdefault(code, ERROR)
    return doc
