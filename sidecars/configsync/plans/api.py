"""`POST /v1/plan`: a plan of a candidate set against the live set and state, on config-sync.

Who may: the operator's credential (`--operator-token-file`); without one the route is not served.
What it does: the pipeline up to the swap (plan.py), behind the apply queue (it waits for a change
being judged or applied to finish, and a change waits for it). Plans run one at a time: a second
one while one runs is answered 429 with Retry-After, never queued without bound. It never swaps,
never reconfigures, never writes the live state (the dry run reads a shadow of it).

The body: `{"files": [{"name": "slurm.conf", "data": "<base64>", "secret": false}, ...]}` — the
whole candidate set. A `secret` file's contents are key material: never shown in the diff.
`GET /v1/plans` lists the recent plans' verdicts, never their diffs (the viewer's credential, like
/history), for the web page beside the generations; without the operator's credential configured it
answers `"served": false` and no plans, so the page can say why. `GET /v1/openapi.json` describes it all.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections import deque
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.configsync.fileset.sources import FileEntry, FileSet
from sidecars.configsync.plans.plan import EXIT_CODES, make_plan
from sidecars.configsync.report.record import now_rfc3339
from sidecars.configsync.service.daemon import ConfigSync
from sidecars.runtime.redact import Redactor
from sidecars.slurm import SlurmError
from sidecars.slurm.models import Node

KEY = re.compile(r"^[-._a-zA-Z0-9]+$")  # a ConfigMap or Secret key
MAX_FILES = 256
RETRY_AFTER_SECONDS = 5
RECENT_PLANS = 20  # kept in memory for GET /v1/plans, newest first
JOBS_LISTED = 50  # a plan's jobs named in GET /v1/plans (all counted): the page's document stays small
SECRET_SOURCE = Path("plan/secret")  # where a request's secret files are said to come from
CONFIG_SOURCE = Path("plan/config")

log = structlog.get_logger(__name__)


class BadPlan(ValueError):
    """The request's body is not a candidate set: 400, with what is wrong."""


def candidate_of(body: Any, max_file_bytes: int) -> FileSet:
    if not isinstance(body, dict) or not isinstance(body.get("files"), list):
        raise BadPlan('the body must be {"files": [{"name", "data" (base64), "secret"}, ...]}')
    items = body["files"]
    if not items or len(items) > MAX_FILES:
        raise BadPlan(f"files: 1 to {MAX_FILES} files are expected, got {len(items)}")
    entries: dict[str, FileEntry] = {}
    for i, item in enumerate(items):
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("data"), str)
        ):
            raise BadPlan(f"files[{i}]: name and data (base64) are strings")
        name, secret = item["name"], item.get("secret", False)
        if not KEY.match(name) or name.startswith(".."):
            raise BadPlan(f"files[{i}]: {name!r} is not a valid file name")
        if not isinstance(secret, bool):
            raise BadPlan(f"files[{i}]: secret is true or false")
        if name in entries:
            raise BadPlan(f"files[{i}]: {name} is given twice")
        try:
            data = base64.b64decode(item["data"], validate=True)
        except (binascii.Error, ValueError):
            raise BadPlan(f"files[{i}]: data is not base64") from None
        source, mode = (SECRET_SOURCE, 0o600) if secret else (CONFIG_SOURCE, 0o644)
        entries[name] = FileEntry(name, data[: max_file_bytes + 1], mode, len(data), source)
    return FileSet.build(entries.values())


class PlanEndpoint:
    """The handler, with the one-at-a-time rule and the service it plans on."""

    def __init__(self, service: ConfigSync, redactor: Redactor) -> None:
        self.service = service
        self.redactor = redactor
        self.running = False
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_PLANS)  # GET /v1/plans, for the web page

    async def post(self, request: web.Request) -> web.Response:
        if self.running:
            return web.json_response(
                {"error": "a plan is running; one at a time"},
                status=429,
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        self.running = True  # set before the first await: a second request sees it
        try:
            try:
                body = await request.json()
                candidate = candidate_of(body, self.service.settings.max_file_bytes)
            except (BadPlan, ValueError) as exc:
                return web.json_response({"error": str(exc)}, status=400)
            async with self.service.queue:  # behind a change being judged or applied
                if self.service.applied is None:  # nothing live to plan against (and no state to read)
                    return web.json_response(
                        {"error": "config-sync has applied no set yet: plan offline"}, status=503
                    )
                live = self.service.applied.files
                fleet = await self._fleet(live)
                plan = await make_plan(
                    self.service.validator,
                    candidate,
                    live,
                    secret_sources=frozenset({*self.service.settings.secret_sources, SECRET_SOURCE}),
                    allow_job_loss=self.service.settings.allow_job_loss,
                    fleet=fleet,
                )
            answer = self.redactor.json(plan.as_json())
            self.recent.append(summary(answer))
            return web.json_response(answer)
        finally:
            self.running = False

    async def _fleet(self, live: FileSet) -> tuple[dict[str, Node], SlurmConf] | None:
        """The live nodes and set, for what the change's reconfigure would wipe (None: unread)."""
        settings = self.service.settings
        try:
            nodes = await self.service.client.node_listing()
            return {n.name: n for n in nodes}, conffile.parse(live, settings.main_file, settings.conf_dir)
        except (SlurmError, ValueError) as exc:
            log.warning("plan_fleet_unread", error=str(exc))
            return None

    async def recent_plans(self, _: web.Request) -> web.Response:
        return web.json_response(
            {"served": True, "limit": RECENT_PLANS, "plans": list(reversed(self.recent))}
        )


def summary(answer: dict[str, Any]) -> dict[str, Any]:
    """A plan as GET /v1/plans lists it: the verdict and why, never a diff (the answer is redacted)."""
    jobs = [j["job_id"] for j in answer["jobs"]]
    return {
        "at": now_rfc3339(),
        **{
            k: answer[k] for k in ("verdict", "sha256", "live_sha256", "reason", "restart", "dry_run_seconds")
        },
        "files": [{"name": f["name"], "change": f["change"]} for f in answer["files"]],
        "jobs": jobs[:JOBS_LISTED],
        "jobs_total": len(jobs),
    }


async def no_plans(_: web.Request) -> web.Response:
    """GET /v1/plans when plans are not served: the page says why rather than failing to read."""
    return web.json_response({"served": False, "limit": 0, "plans": []})


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI `content` of JSON with this schema."""
    return {"application/json": {"schema": schema}}


def openapi(served: bool) -> dict[str, Any]:
    """config-sync's API as OpenAPI 3.1: the plan route (when served) and the read-only views."""
    plan_schema = {
        "type": "object",
        "required": ["verdict", "exit_code", "sha256", "files", "checks", "not_checked"],
        "properties": {
            "verdict": {"enum": list(EXIT_CODES)},
            "exit_code": {"type": "integer", "enum": sorted(set(EXIT_CODES.values()))},
            "sha256": {"type": "string"},
            "live_sha256": {"type": ["string", "null"]},
            "reason": {"type": "string", "description": "why not, in Slurm's own words where it gave any"},
            "jobs": {"type": "array", "items": {"type": "object"}},
            "restart": {"type": "array", "items": {"type": "string"}},
            "files": {"type": "array", "items": {"type": "object"}},
            "checks": {"type": "array", "items": {"type": "string"}},
            "not_checked": {"type": "array", "items": {"type": "string"}},
            "dry_run_seconds": {"type": ["number", "null"]},
        },
    }
    error = {"type": "object", "properties": {"error": {"type": "string"}}}
    paths: dict[str, Any] = {
        "/status": {
            "get": {"summary": "what is applied, rejected, held", "responses": {"200": {"description": "ok"}}}
        },
        "/history": {
            "get": {"summary": "the last generations with diffs", "responses": {"200": {"description": "ok"}}}
        },
    }
    recent = {
        "type": "object",
        "required": ["served", "limit", "plans"],
        "properties": {
            "served": {"type": "boolean", "description": "false: started without --operator-token-file"},
            "limit": {"type": "integer", "description": "how many plans are kept"},
            "plans": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "at": {"type": "string", "format": "date-time"},
                        "verdict": {"enum": list(EXIT_CODES)},
                        "sha256": {"type": "string"},
                        "live_sha256": {"type": ["string", "null"]},
                        "reason": {"type": "string"},
                        "restart": {"type": "array", "items": {"type": "string"}},
                        "dry_run_seconds": {"type": ["number", "null"]},
                        "files": {"type": "array", "items": {"type": "object"}},
                        "jobs": {"type": "array", "items": {"type": "integer"}, "maxItems": JOBS_LISTED},
                        "jobs_total": {"type": "integer"},
                    },
                },
            },
        },
    }
    paths["/v1/plans"] = {
        "get": {
            "summary": "the recent plans' verdicts, newest first, without diffs (the viewer's credential)",
            "responses": {
                "200": {"description": "ok", "content": _json(recent)},
                "401": {"description": "no viewer credential"},
            },
        }
    }
    if served:
        a_file = {
            "type": "object",
            "required": ["name", "data"],
            "properties": {
                "name": {"type": "string", "pattern": KEY.pattern},
                "data": {"type": "string", "contentEncoding": "base64"},
                "secret": {"type": "boolean", "default": False},
            },
        }
        candidate = {
            "type": "object",
            "required": ["files"],
            "properties": {"files": {"type": "array", "maxItems": MAX_FILES, "items": a_file}},
        }
        paths["/v1/plan"] = {
            "post": {
                "summary": "what a candidate set would do: the pipeline up to, not including, the swap",
                "security": [{"operator": []}],
                "requestBody": {"required": True, "content": _json(candidate)},
                "responses": {
                    "200": {"description": "the plan", "content": _json(plan_schema)},
                    **{
                        code: {"description": why, "content": _json(error)}
                        for code, why in (
                            ("400", "not a candidate set"),
                            ("401", "no operator credential"),
                            ("429", "a plan is running (Retry-After)"),
                            ("503", "no set applied yet: nothing live to plan against"),
                        )
                    },
                },
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {"title": "slurm-sidecars config-sync", "version": "1"},
        "components": {"securitySchemes": {"operator": {"type": "http", "scheme": "bearer"}}},
        "paths": paths,
    }


def add_routes(app: web.Application, endpoint: PlanEndpoint | None) -> None:
    document = openapi(endpoint is not None)

    async def spec(_: web.Request) -> web.Response:
        return web.json_response(document)

    app.router.add_get("/v1/openapi.json", spec)
    app.router.add_get("/v1/plans", endpoint.recent_plans if endpoint is not None else no_plans)
    if endpoint is not None:
        app.router.add_post("/v1/plan", endpoint.post)


__all__ = ["PlanEndpoint", "add_routes"]
