"""The operator's web page at /ui/: static files shipped in the package, and its one data request.

Access: the page shows cluster internals, so its data needs the viewer token
(`--viewer-token-file`, read-only, required; never the operator's or the agents' credential). The
token is typed into the page and POSTed as JSON to /ui/login, which answers with a session cookie
(HttpOnly, SameSite=Strict, Path=/ui, 12 h, Secure behind https). The cookie is `<expiry>.<HMAC of
it keyed by the token>`, so it needs no server-side store, holds across replicas and dies with the
token. A token never travels in a URL, so none reaches an access log or a browser history. Scripts
may send `Authorization: Bearer <viewer token>` to /ui/api/state instead. Every answer carries a
Content-Security-Policy that allows only this origin: the page fetches nothing from anywhere else."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from importlib import resources

from aiohttp import web

from sidecars.controlplane.http.page import PageState

COOKIE = "sidecars_session"
SESSION_SECONDS = 12 * 3600
MAX_LOGIN_BODY = 4096
STATIC = {  # name -> content type; nothing else under /ui/static/ is served
    "app.js": "text/javascript",
    "app.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


def static_files() -> dict[str, bytes]:
    folder = resources.files("sidecars.controlplane.http") / "static"
    return {name: (folder / name).read_bytes() for name in ("index.html", *STATIC)}


class WebUI:
    def __init__(self, token: str | None, page: PageState, *, max_wait: float = 30.0) -> None:
        # no viewer credential: a key no one holds, so the page opens to no one (not to another token)
        self._token = token.encode() if token else secrets.token_urlsafe(32).encode()
        self._key = hashlib.sha256(b"slurm-sidecars web session\0" + self._token).digest()
        self._bearer = b"Bearer " + self._token
        self.page = page
        self.max_wait = max_wait
        self._files = static_files()  # read once: a missing file fails at start, not on a request

    # ------------------------------------------------------------------ sessions
    def _sign(self, expiry: int) -> str:
        return hmac.new(self._key, str(expiry).encode(), hashlib.sha256).hexdigest()

    def session_cookie(self, now: float | None = None) -> str:
        expiry = int((time.time() if now is None else now) + SESSION_SECONDS)
        return f"{expiry}.{self._sign(expiry)}"

    def _valid_session(self, value: str) -> bool:
        expiry_text, _, sig = value.partition(".")
        if not expiry_text.isdigit() or len(expiry_text) > 12:
            return False
        expiry = int(expiry_text)
        return hmac.compare_digest(sig.encode(), self._sign(expiry).encode()) and expiry > time.time()

    def authorised(self, request: web.Request) -> bool:
        given = request.headers.get("Authorization")
        if given is not None:
            return hmac.compare_digest(given.encode("utf-8", "replace"), self._bearer)
        cookie = request.cookies.get(COOKIE)
        return cookie is not None and self._valid_session(cookie)

    # ------------------------------------------------------------------ plumbing
    @web.middleware
    async def headers(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        resp = await handler(request)
        if request.path == "/ui" or request.path.startswith("/ui/"):
            resp.headers.update(HEADERS)
        return resp

    def install(self, app: web.Application) -> None:
        app.middlewares.append(self.headers)
        r = app.router
        r.add_get("/ui", self.to_index)
        r.add_get("/ui/", self.index)
        r.add_get("/ui/static/{name}", self.static)
        r.add_post("/ui/login", self.login)
        r.add_post("/ui/logout", self.logout)
        r.add_get("/ui/api/state", self.state)

    @staticmethod
    def _error(status: int, message: str) -> web.Response:
        return web.json_response({"error": message}, status=status, headers={"Cache-Control": "no-store"})

    # ------------------------------------------------------------------ routes
    async def to_index(self, _: web.Request) -> web.Response:
        raise web.HTTPFound("/ui/")

    async def index(self, _: web.Request) -> web.Response:
        return web.Response(
            body=self._files["index.html"],
            content_type="text/html",
            charset="utf-8",
            headers={"Cache-Control": "no-cache"},
        )

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            return self._error(404, "no such file")
        return web.Response(
            body=self._files[name],
            content_type=STATIC[name],
            charset="utf-8" if STATIC[name].startswith("text/") else None,
            headers={"Cache-Control": "no-cache"},
        )

    async def login(self, request: web.Request) -> web.Response:
        # JSON only: a cross-site form cannot send it without a CORS preflight we never answer
        if request.content_type != "application/json":
            return self._error(415, 'send the token as JSON: {"token": "..."}')
        if request.content_length is not None and request.content_length > MAX_LOGIN_BODY:
            return self._error(413, f"request body larger than {MAX_LOGIN_BODY} bytes")
        raw = await request.read()  # read already, under the server's body deadline
        if len(raw) > MAX_LOGIN_BODY:
            return self._error(413, f"request body larger than {MAX_LOGIN_BODY} bytes")
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return self._error(400, "body is not valid JSON")
        token = body.get("token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            return self._error(400, 'body must be {"token": "..."}')
        if not hmac.compare_digest(token.strip().encode("utf-8", "replace"), self._token):
            return self._error(401, "wrong token")
        resp = web.Response(status=204, headers={"Cache-Control": "no-store"})
        resp.set_cookie(
            COOKIE,
            self.session_cookie(),
            max_age=SESSION_SECONDS,
            path="/ui",
            httponly=True,
            samesite="Strict",
            secure=request.secure or request.headers.get("X-Forwarded-Proto") == "https",
        )
        return resp

    async def logout(self, _: web.Request) -> web.Response:
        resp = web.Response(status=204, headers={"Cache-Control": "no-store"})
        resp.del_cookie(COOKIE, path="/ui")
        return resp

    async def state(self, request: web.Request) -> web.Response:
        if not self.authorised(request):
            return self._error(401, "log in with the viewer token")
        since = request.query.get("since")
        try:
            wait = float(request.query.get("wait", "0"))
        except ValueError:
            return self._error(400, "wait must be a number of seconds")
        if not math.isfinite(wait) or wait < 0:
            return self._error(400, "wait must be a finite number of seconds >= 0")
        body = await self.page.wait(since, min(wait, self.max_wait))
        resp = web.Response(body=body, content_type="application/json", headers={"Cache-Control": "no-store"})
        resp.enable_compression()
        return resp
