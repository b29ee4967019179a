"""`/v1/maintenance`: list, create and delete maintenance windows (writes by the Lease holder only)."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from sidecars.controlplane.changes.maintenance import WINDOW_NAME, Maintenance, WindowError
from sidecars.controlplane.http.bodies import read_body
from sidecars.controlplane.http.errors import Leadership, error, not_leader
from sidecars.controlplane.http.openapi import maintenance as openapi_maintenance
from sidecars.slurm import SlurmError


@dataclass(eq=False)
class MaintenanceAPI:
    maintenance: Maintenance
    leadership: Leadership

    def install(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/v1/maintenance", self.list)
        r.add_post("/v1/maintenance", self.create)
        r.add_get("/v1/maintenance/{window}", self.show)
        r.add_delete("/v1/maintenance/{window}", self.delete)

    def _not_leader(self) -> web.Response | None:
        return not_leader(self.leadership)

    async def list(self, _: web.Request) -> web.Response:
        try:
            windows = await self.maintenance.read()  # Slurm's word now, not the last cycle's
        except SlurmError as exc:
            return error(503, f"cannot read reservations from Slurm: {exc.message}")
        return web.json_response({"windows": [self.maintenance.describe(w) for w in windows]})

    async def show(self, request: web.Request) -> web.Response:
        name = request.match_info["window"]
        if not WINDOW_NAME.match(name):
            return error(400, "invalid window name")
        try:
            windows = await self.maintenance.read()
        except SlurmError as exc:
            return error(503, f"cannot read reservations from Slurm: {exc.message}")
        found = next((w for w in windows if w.name == name), None)
        if found is None:
            return error(404, f"no maintenance window {name}")
        return web.json_response(self.maintenance.describe(found))

    async def create(self, request: web.Request) -> web.Response:
        body = await read_body(request, openapi_maintenance.schemas()["MaintenanceRequest"])
        if isinstance(body, web.Response):  # the schema's 422: a field unknown, missing or not a string
            return body
        refused = self._not_leader()
        if refused is not None:
            return refused
        try:
            window = await self.maintenance.create(
                name=body.get("name"),
                nodes=body["nodes"],
                start=body["start"],
                duration=body["duration"],
                reason=body["reason"],
            )
        except WindowError as exc:
            return error(exc.status, exc.message)
        except SlurmError as exc:
            return error(503, f"Slurm unreachable: {exc.message}")
        return web.json_response(self.maintenance.describe(window), status=201)

    async def delete(self, request: web.Request) -> web.Response:
        name = request.match_info["window"]
        if not WINDOW_NAME.match(name):
            return error(400, "invalid window name")
        refused = self._not_leader()
        if refused is not None:
            return refused
        try:
            window = await self.maintenance.delete(name)
        except WindowError as exc:
            return error(exc.status, exc.message)
        except SlurmError as exc:
            return error(503, f"Slurm unreachable: {exc.message}")
        return web.json_response({"deleted": window.name, "nodes": list(window.nodes)})
