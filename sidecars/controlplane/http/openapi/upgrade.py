"""The OpenAPI 3 paths and schemas of /v1/upgrade (merged into openapi.document())."""

from __future__ import annotations

from typing import Any

from sidecars.controlplane.changes.cluster_upgrade.run import ROLES
from sidecars.controlplane.http.openapi.shared import DONE, json_body, refusals

CLUSTER_VERSION = "^[0-9]{2}\\.[0-9]{2}(\\.[0-9]+)?$"
# an image reference (registry/name:tag@digest), a revision or, in the dev cluster, a release's name
IMAGE = "^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,254}$"


def schemas() -> dict[str, Any]:
    return {
        # the handler checks exactly this itself, so that a bad field is a 400 naming it
        "ClusterUpgradeRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["slurm_version", "images"],
            "properties": {
                "slurm_version": {
                    "type": "string",
                    "pattern": CLUSTER_VERSION,
                    "description": "the release every daemon moves to, such as 26.05; refused when "
                    "outside Slurm's window from any daemon running now",
                },
                "images": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": list(ROLES),
                    "description": "each role's new image or revision (in the dev cluster: a release's name)",
                    "properties": {
                        role: {"type": "string", "pattern": IMAGE, "description": f"{role}'s new image"}
                        for role in ROLES
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
    }


def paths() -> dict[str, Any]:
    return {
        "/v1/upgrade": {
            "get": {
                "summary": "the upgrade under way (or the last): per worker queued, waiting for jobs, "
                "drained, replacing, returning or upgraded; null when none was started; and `versions`: "
                "slurmctld's release and each slurmd's, as its agent reported it and its node record has it",
                "responses": {"200": DONE, **refusals(401, 503)},
            },
            "post": {
                "summary": "start a paced roll: of a StatefulSet to a revision, or of a Deployment (paused "
                "now, its template changed after); the plan is kept in the ConfigMap slurm-sidecars-upgrade",
                "requestBody": json_body(schemas()["UpgradeRequest"]),
                "responses": {"201": DONE, **refusals(400, 401, 409, 413, 422, 503)},
            },
        },
        "/v1/upgrade/cluster": {
            "post": {
                "summary": "start a whole-cluster upgrade in Slurm's order: preflight, slurmdbd (a database "
                "backup first), slurmctld (a state copy first, rolled back automatically when it comes up "
                "without its jobs), the workers; its stages are in GET /v1/upgrade's `cluster`",
                "requestBody": json_body(schemas()["ClusterUpgradeRequest"]),
                "responses": {"201": DONE, **refusals(400, 401, 409, 413, 422, 503)},
            }
        },
        "/v1/upgrade/pause": {
            "post": {
                "summary": "drain no further worker (those out of service finish); a whole-cluster "
                "upgrade waits before its next stage",
                "responses": {"200": DONE, **refusals(401, 404, 409, 503)},
            }
        },
        "/v1/upgrade/resume": {
            "post": {"summary": "go on", "responses": {"200": DONE, **refusals(401, 404, 409, 503)}}
        },
    }
