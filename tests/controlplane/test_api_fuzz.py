"""Requests generated from /v1/openapi.json (valid ones and deliberately wrong ones): never a 5xx.

Hypothesis generates the requests from the document the server serves; they are then sent to a
control plane reading a real Slurm. (schemathesis would do the same with more machinery; a small
schema-to-strategy walker is enough for seven operations and adds no dependency.)
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecars.controlplane.openapi import document
from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import TOKEN, control_plane

pytestmark = pytest.mark.cluster(nodes=2)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


def from_schema(schema: dict[str, Any], names: list[str]) -> st.SearchStrategy[Any]:
    """Values that fit the schema, mixed with values that do not (the server must refuse those cleanly)."""
    kind = schema.get("type")
    if "pattern" in schema and kind == "string":
        valid: st.SearchStrategy[Any] = st.from_regex(schema["pattern"], fullmatch=False).map(
            lambda s: s[: schema.get("maxLength", 300)]
        )
        if schema["pattern"].startswith("^[A-Za-z0-9]"):
            valid = st.sampled_from(names) | valid
    elif kind == "string":
        valid = st.text(max_size=schema.get("maxLength", 50))
    elif kind == "integer":
        valid = st.integers(-(2**63), 2**63)
    elif kind == "number":
        valid = st.floats(schema.get("minimum", 0), min(schema.get("maximum", 60), 0.5))
    elif kind == "boolean":
        valid = st.booleans()
    elif kind == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        valid = st.fixed_dictionaries(
            {k: from_schema(v, names) for k, v in props.items() if k in required},
            optional={k: from_schema(v, names) for k, v in props.items() if k not in required},
        )
    else:
        valid = JSON
    return st.one_of(valid, valid, JSON)


def operations(names: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    ops = []
    for path, methods in document()["paths"].items():
        for method, op in methods.items():
            params = op.get("parameters", [])
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")

            @st.composite
            def one(
                draw: st.DrawFn,
                path: str = path,
                method: str = method,
                params: list[Any] = params,
                body: dict[str, Any] | None = body,
            ) -> dict[str, Any]:
                url, query = path, {}
                for p in params:
                    value = draw(from_schema(p["schema"], names) | st.text(max_size=10))
                    if p["in"] == "path":
                        url = url.replace("{" + p["name"] + "}", quote(str(value), safe="") or "x")
                    elif draw(st.booleans()):
                        query[p["name"]] = value if isinstance(value, str) else json.dumps(value)
                data = None
                if body is not None:
                    data = draw(
                        st.one_of(
                            from_schema(body, names).map(lambda v: json.dumps(v).encode()),
                            st.binary(max_size=64),
                        )
                    )
                auth = draw(st.sampled_from([f"Bearer {TOKEN}"] * 4 + ["", "Bearer", "Basic eA=="]))
                return {"method": method.upper(), "url": url, "query": query, "data": data, "auth": auth}

            ops.append(one())
    return st.one_of(ops)


async def test_no_request_generated_from_the_openapi_document_gets_a_5xx(cluster: DevCluster) -> None:
    async with control_plane(cluster) as cp:
        served = (await cp.get("/v1/openapi.json"))[1]
        assert served == json.loads(json.dumps(document()))
        assert set(served["paths"]) >= {
            "/v1/nodes",
            "/v1/nodes/{name}",
            "/v1/nodes/{name}/drain",
            "/v1/nodes/{name}/undrain",
            "/v1/scale-in-order",
        }
        requests: list[dict[str, Any]] = []

        @settings(
            max_examples=250,
            database=None,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        @given(operations(cluster.node_names))
        def collect(req: dict[str, Any]) -> None:
            requests.append(req)

        collect()
        statuses: dict[int, int] = {}
        for req in requests:
            headers = {"Authorization": req["auth"]} if req["auth"] else {}
            async with cp.session.request(
                req["method"], cp.url + req["url"], params=req["query"], data=req["data"], headers=headers
            ) as r:
                await r.read()
                assert r.status < 500, (req, r.status, await r.text())
                statuses[r.status] = statuses.get(r.status, 0) + 1
        # the generator reaches past the door: successes and refusals of every kind
        assert {200, 401, 404} <= set(statuses), statuses
        assert statuses.keys() & {202, 204} and statuses.keys() & {400, 422}, statuses
