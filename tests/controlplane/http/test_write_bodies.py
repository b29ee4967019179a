"""A maintenance window's and a worker roll's request body is refused by the schema the document
states, before the handler looks at it: an unknown, missing or mistyped field is a 422 naming it,
and nothing is asked of Slurm or Kubernetes (the handlers keep no second copy of these checks)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from sidecars.controlplane.changes import Maintenance
from sidecars.controlplane.http.maintenance_api import MaintenanceAPI
from sidecars.controlplane.http.upgrade_api import UpgradeAPI
from sidecars.slurm import SlurmClient

WINDOW = {"nodes": "n[1-2]", "start": "now", "duration": "1h", "reason": "kernel"}
ROLL = {"revision": "abc123", "budget": "1"}


class Leading:
    is_leader = True
    holder: str | None = "me"


class Untouchable:
    """Stands for Slurm, the maintenance windows and the roll: a refused body reaches none of them."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a refused body reached .{name}")


@pytest.mark.parametrize(
    ("path", "body", "said"),
    [
        ("/v1/maintenance", {**WINDOW, "bogus": "1"}, "unknown properties 'bogus'"),
        ("/v1/maintenance", {k: v for k, v in WINDOW.items() if k != "reason"}, "reason missing"),
        ("/v1/maintenance", {**WINDOW, "duration": 3}, "duration must be a string"),
        ("/v1/upgrade", {**ROLL, "bogus": 1}, "unknown properties 'bogus'"),
    ],
)
async def test_a_body_the_schema_refuses_is_a_422_naming_the_field(
    path: str, body: dict[str, Any], said: str
) -> None:
    app = web.Application()
    untouchable = Untouchable()
    MaintenanceAPI(cast(Maintenance, untouchable), Leading()).install(app)
    UpgradeAPI(cast(Any, untouchable), cast(SlurmClient, untouchable), Leading()).install(app)
    async with TestClient(TestServer(app)) as client:
        r = await client.post(path, json=body)
        assert r.status == 422
        assert said in (await r.json())["error"]
