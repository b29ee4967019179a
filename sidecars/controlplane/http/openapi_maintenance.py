"""The OpenAPI 3 paths and schemas of /v1/maintenance and /v1/upgrade (merged into openapi.document())."""

from __future__ import annotations

from typing import Any

_ERROR = {
    "description": "refused",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_WINDOW_PARAM = {
    "name": "window",
    "in": "path",
    "required": True,
    "description": "maintenance window name",
    "schema": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,62}$"},
}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): _ERROR for c in codes}


def _json(ref: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": ref}}}}


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
        "UpgradeRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["budget"],
            "oneOf": [{"required": ["revision"]}, {"required": ["deployment"]}],
            "properties": {
                "revision": {
                    "type": "string",
                    "pattern": "^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$",
                    "description": "a StatefulSet's: the new pods' controller-revision-hash (give this "
                    "or deployment)",
                },
                "deployment": {
                    "type": "string",
                    "pattern": "^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$",
                    "description": "a Deployment's name: it is paused now, its template changed after, "
                    "and its old pods handed over to it one turn at a time (give this or revision)",
                },
                "budget": {
                    "type": "string",
                    "pattern": "^[1-9][0-9]*%?$",
                    "description": "a budget of 0 (or not a number or a percentage) is refused: e.g. 2, 25%",
                },
                "slurm_version": {
                    "type": "string",
                    "pattern": "^[0-9]{2}\\.[0-9]{2}(\\.[0-9]+)?$",
                    "description": "the new image's slurmd release; refused when slurmctld is older or more "
                    "than two releases newer",
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
    simple = {"description": "done", "content": {"application/json": {"schema": {"type": "object"}}}}
    return {
        "/v1/upgrade": {
            "get": {
                "summary": "the upgrade under way (or the last): per worker queued, waiting for jobs, "
                "drained, replacing, returning or upgraded; null when none was started; and `versions`: "
                "slurmctld's release and each slurmd's, as its agent reported it and its node record has it",
                "responses": {"200": simple, **_errors(401, 503)},
            },
            "post": {
                "summary": "start a paced roll: of a StatefulSet to a revision, or of a Deployment (paused "
                "now, its template changed after); the plan is kept in the ConfigMap slurm-sidecars-upgrade",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": schemas()["UpgradeRequest"]}},
                },
                "responses": {"201": simple, **_errors(400, 401, 409, 413, 422, 503)},
            },
        },
        "/v1/upgrade/pause": {
            "post": {
                "summary": "drain no further worker (those out of service finish)",
                "responses": {"200": simple, **_errors(401, 404, 409, 503)},
            }
        },
        "/v1/upgrade/resume": {
            "post": {"summary": "go on", "responses": {"200": simple, **_errors(401, 404, 409, 503)}}
        },
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
                    **_errors(401, 503),
                },
            },
            "post": {
                "summary": "create a window: a MAINT reservation now, drains from its start as jobs end",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": schemas()["MaintenanceRequest"]}},
                },
                "responses": {
                    "201": _json(window, "created"),
                    **_errors(400, 401, 409, 413, 422, 503),
                },
            },
        },
        "/v1/maintenance/{window}": {
            "get": {
                "summary": "one window",
                "parameters": [_WINDOW_PARAM],
                "responses": {"200": _json(window, "the window"), **_errors(400, 401, 404, 503)},
            },
            "delete": {
                "summary": "end a window now: its reservation removed, its drains (ours only) undone",
                "parameters": [_WINDOW_PARAM],
                "responses": {"200": {"description": "deleted"}, **_errors(400, 401, 404, 409, 503)},
            },
        },
    }
