"""The fake API server's kinds kept whole by name in a namespace, ConfigMaps and Leases: get, create
(409 AlreadyExists) and replace (404 NotFound), in the real REST paths and JSON. A Lease's replace
is optimistic, as the real server's: one naming a resourceVersion older than the stored one is a 409
Conflict, which leader election counts on."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from aiohttp import web

from tests.fakekube.server import BODY, FakeKube, Obj, not_found, refusal


@dataclass(frozen=True)
class Named:
    """The handlers of one such kind, over `store` (a dict of FakeKube's, keyed by namespace and
    name, which tests read and write directly)."""

    fake: FakeKube
    store: dict[tuple[str, str], Obj]
    resource: str  # as the API's messages name it: configmaps, leases.coordination.k8s.io
    type_meta: Obj  # apiVersion and kind written on each stored object ({}: kept as sent)
    uid: bool  # a uid given at creation, and kept by a replace
    optimistic: bool  # a replace naming an older resourceVersion is refused

    def routes(self, app: web.Application, path: str) -> None:
        app.router.add_get(path + "/{name}", self.get)
        app.router.add_post(path, self.create)
        app.router.add_put(path + "/{name}", self.replace)

    def _keep(self, ns: str, name: str, obj: Obj, uid: str | None) -> Obj:
        obj.update(self.type_meta)
        obj["metadata"].update(namespace=ns, resourceVersion=self.fake._bump())
        if uid is not None:
            obj["metadata"]["uid"] = uid
        self.store[(ns, name)] = obj
        return obj

    async def get(self, request: web.Request) -> web.StreamResponse:
        found = self.store.get((request.match_info["ns"], request.match_info["name"]))
        return not_found(self.resource, request) if found is None else web.json_response(found)

    async def create(self, request: web.Request) -> web.StreamResponse:
        obj, ns = request[BODY], request.match_info["ns"]
        name = obj["metadata"]["name"]
        if (ns, name) in self.store:
            return refusal(409, "AlreadyExists", f'{self.resource} "{name}" already exists')
        uid = str(uuid.uuid4()) if self.uid else None
        return web.json_response(self._keep(ns, name, obj, uid), status=201)

    async def replace(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["ns"], request.match_info["name"]
        current = self.store.get((ns, name))
        if current is None:
            return not_found(self.resource, request)
        obj = request[BODY]
        wanted = obj["metadata"].get("resourceVersion")
        if self.optimistic and wanted and wanted != current["metadata"]["resourceVersion"]:
            return refusal(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {self.resource} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )
        uid = current["metadata"]["uid"] if self.uid else None
        return web.json_response(self._keep(ns, name, obj, uid))
