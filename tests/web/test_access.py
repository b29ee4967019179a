"""The page is not open: its data needs the viewer token, given once in a request body and turned
into an HttpOnly, SameSite=Strict session cookie; a token in the URL opens nothing."""

from __future__ import annotations

import time

from sidecars.controlplane.web import COOKIE
from tests.web.fleet import VIEWER, node, served, session


async def test_the_shell_is_served_but_no_data_without_a_credential() -> None:
    async with served() as s, session() as http:
        s.publish([node("n1")], [])
        async with http.get(s.url + "/ui/") as r:
            html = await r.text()
            assert r.status == 200 and 'src="static/app.js"' in html
            csp = r.headers["Content-Security-Policy"]
            assert (
                "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
            )
        for name, kind in [("app.js", "text/javascript"), ("app.css", "text/css")]:
            async with http.get(f"{s.url}/ui/static/{name}") as r:
                assert r.status == 200 and r.content_type == kind and len(await r.read()) > 1000
        async with http.get(s.url + "/ui/static/..%2fweb.py") as r:
            assert r.status == 404
        async with http.get(s.url + "/ui/api/state") as r:
            assert r.status == 401 and "n1" not in await r.text()
        # a token in the query string (which would land in logs and histories) opens nothing
        async with http.get(s.url + "/ui/api/state", params={"token": VIEWER}) as r:
            assert r.status == 401
        async with http.get(s.url + "/ui/api/state", headers={"Authorization": "Bearer nope"}) as r:
            assert r.status == 401
        async with http.get(s.url + "/ui/api/state", headers={"Authorization": f"Bearer {VIEWER}"}) as r:
            assert r.status == 200 and (await r.json())["nodes"][0]["name"] == "n1"


async def test_login_sets_a_strict_httponly_cookie_that_opens_the_data() -> None:
    async with served() as s, session() as http:
        s.publish([node("n1")], [])
        async with http.post(s.url + "/ui/login", json={"token": "wrong"}) as r:
            assert r.status == 401 and COOKIE not in r.cookies
        # a plain HTML form (what another site could make a browser send) is refused
        async with http.post(s.url + "/ui/login", data={"token": VIEWER}) as r:
            assert r.status == 415 and COOKIE not in r.cookies
        async with http.post(
            s.url + "/ui/login", data=b"{not json", headers={"Content-Type": "application/json"}
        ) as r:
            assert r.status == 400
        async with http.post(s.url + "/ui/login", json={"token": VIEWER}) as r:
            assert r.status == 204
            morsel = r.cookies[COOKIE]
            assert morsel["httponly"] and morsel["samesite"] == "Strict" and morsel["path"] == "/ui"
            assert not morsel["secure"]  # plain http (a port-forward): a Secure cookie would never return
            assert VIEWER not in morsel.value
        async with http.get(s.url + "/ui/api/state") as r:
            assert r.status == 200 and r.headers["Cache-Control"] == "no-store"
        async with http.post(s.url + "/ui/logout") as r:
            assert r.status == 204
        async with http.get(s.url + "/ui/api/state") as r:
            assert r.status == 401
        # behind an https proxy the cookie is Secure
        async with http.post(
            s.url + "/ui/login", json={"token": VIEWER}, headers={"X-Forwarded-Proto": "https"}
        ) as r:
            assert r.status == 204 and r.cookies[COOKIE]["secure"]


async def test_forged_expired_and_foreign_sessions_are_refused() -> None:
    async with served() as s, served(token="another-clusters-token") as other, session() as http:
        s.publish([node("n1")], [])
        good = s.web.session_cookie()
        expiry, sig = good.split(".")
        cases = {
            "tampered expiry": f"{int(expiry) + 3600}.{sig}",
            "expired": s.web.session_cookie(now=time.time() - 13 * 3600),
            "another token's": other.web.session_cookie(),
            "garbage": "x.y",
        }
        for what, value in cases.items():
            async with http.get(s.url + "/ui/api/state", headers={"Cookie": f"{COOKIE}={value}"}) as r:
                assert r.status == 401, what
        async with http.get(s.url + "/ui/api/state", headers={"Cookie": f"{COOKIE}={good}"}) as r:
            assert r.status == 200


async def test_the_agents_token_does_not_open_a_page_with_its_own_viewer_token() -> None:
    from sidecars.controlplane.service import ControlPlane
    from sidecars.controlplane.settings import ControlPlaneSettings
    from sidecars.slurm import SlurmClient
    from tests.settings import TOKEN, build

    settings = build(ControlPlaneSettings, viewer_token=VIEWER, kubernetes=False)
    plane = ControlPlane(settings, SlurmClient(), None)
    app = plane.http_app()
    from sidecars.runtime import http as rt

    async with rt.serve(app, "127.0.0.1", 0) as port, session() as http:
        url = f"http://127.0.0.1:{port}"
        async with http.post(url + "/ui/login", json={"token": TOKEN}) as r:
            assert r.status == 401
        async with http.get(url + "/ui/api/state", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
            assert r.status == 401
        async with http.get(url + "/ui/api/state", headers={"Authorization": f"Bearer {VIEWER}"}) as r:
            assert r.status == 200  # before the first Slurm read: the page says so itself
            assert (await r.json())["loaded"] is False
        # and the viewer token writes nothing: a drain wants the operator's (or the node's agent's)
        drain = url + "/v1/nodes/n1/drain"
        async with http.post(drain, json={}, headers={"Authorization": f"Bearer {VIEWER}"}) as r:
            assert r.status == 403
