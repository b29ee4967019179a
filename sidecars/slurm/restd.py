"""slurmrestd's health, asked over its own HTTP: the one place we speak to slurmrestd.

Measured with Debian's slurmrestd (`-a rest_auth/jwt`), 24.11.5 and 26.05.5:
- 26.05 serves `/healthz`, `/readyz` and `/livez`: 204 with a valid token, 401 without one (these
  paths sit behind its authentication like every other). 24.11 answers 404 there.
- Both answer `GET /slurm/v0.0.N/ping` with the controllers' ping (200, JSON) for the data parser
  versions they carry: v0.0.40-42 on 24.11, v0.0.42-45 on 26.05; any other N is a 404.
- 26.05 writes a malformed reply to every request it refuses or cannot route: after the body come a
  stray `Connection: Close` line and the whole reply again. A strict client (aiohttp) fails on it, so
  the status line and a capped body are read here by hand, and what follows them is ignored.

- 26.05's `/readyz` (and `/healthz`, `/livez`) stay 204 with slurmctld stopped: they speak for
  slurmrestd alone. The ping then lists the controller `"responding": false`.

So liveness is the release's own `/livez` (any reply at all on a release without one), and
readiness is its own `/readyz` where served and, on every release, a ping through the REST API at
the newest data parser version that answers, which says whether some controller of the
SlurmctldHost list responds (slurmrestd follows the one in control).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass

from sidecars.runtime import waits

# data parser versions, newest first: a ping is tried at each until one is not a 404
PING_VERSIONS = ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40")
HEAD_MAX_BYTES = 16 * 1024
BODY_MAX_BYTES = 256 * 1024  # a ping of a dozen controllers is ~2 KiB; the cap bounds a hostile peer
TOKEN_HEADER = "X-SLURM-USER-TOKEN"
USER_HEADER = "X-SLURM-USER-NAME"
AUTH_ERROR = "Protocol authentication error"  # Slurm's words for a token slurmctld refused


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes


@dataclass(frozen=True, slots=True)
class RestdAnswer:
    ok: bool
    detail: str  # what was asked and what it said, or why nothing could be asked
    via: str = ""  # the path that decided: "/readyz", "/slurm/v0.0.42/ping", "" when unreachable


class HttpError(Exception):
    """No usable HTTP reply (refused, reset, timed out, not HTTP)."""


async def get(host: str, port: int, path: str, headers: dict[str, str], timeout: float) -> Reply:
    """One GET over a fresh connection, `Connection: close`; the status and up to BODY_MAX_BYTES of
    the body (by Content-Length, else to the end). Linear in what is read; everything after the
    body is left unread."""
    try:
        return await waits.within(_get(host, port, path, headers), timeout)
    except TimeoutError:
        raise HttpError(f"no reply within {timeout:g}s") from None
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
        raise HttpError(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None


async def _get(host: str, port: int, path: str, headers: dict[str, str]) -> Reply:
    reader, writer = await asyncio.open_connection(host, port, limit=HEAD_MAX_BYTES)
    try:
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close", "Accept: */*"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")  # LimitOverrunError beyond HEAD_MAX_BYTES
        status_line, *fields = head.decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ValueError(f"not an HTTP reply: {status_line[:80]!r}")
        length = None
        for field in fields:
            name, _, value = field.partition(":")
            if name.strip().lower() == "content-length" and value.strip().isdigit():
                length = int(value.strip())
        status = int(parts[1])
        if status in (204, 304) or length == 0:
            return Reply(status, b"")
        want = min(length if length is not None else BODY_MAX_BYTES, BODY_MAX_BYTES)
        body = await reader.read(want) if length is None else await reader.readexactly(want)
        return Reply(status, body)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def auth_headers(token: str | None, user: str | None = None) -> dict[str, str]:
    headers = {TOKEN_HEADER: token} if token else {}
    if token and user:
        headers[USER_HEADER] = user
    return headers


def ping_verdict(body: bytes) -> tuple[bool, str]:
    """Whether the ping's controllers include one that responds, in words. v0.0.42+ say
    `responding`; v0.0.40-41 say `pinged: UP` only."""
    try:
        doc = json.loads(body)
        pings = doc.get("pings") or []
        errors = [e.get("description") or e.get("error") or "" for e in doc.get("errors") or []]
    except (ValueError, AttributeError):
        return False, "ping: not JSON"
    if not isinstance(pings, list):
        return False, "ping: no list of controllers"
    seen = []
    up = False
    for p in pings[:64]:
        if not isinstance(p, dict):
            continue
        responding = p.get("responding")
        alive = bool(responding) if responding is not None else str(p.get("pinged", "")).upper() == "UP"
        up = up or alive
        role = p.get("mode") or ("primary" if p.get("primary") else "backup")
        status = str(p.get("status") or "")[:120]  # v0.0.45: Slurm's words ("Protocol authentication error")
        why = f": {status}" if status and not alive else ""
        seen.append(f"{p.get('hostname', '?')} ({role}) {'up' if alive else 'down'}{why}")
    if up:
        return True, "controllers: " + ", ".join(seen)
    why = "; ".join(e for e in errors if e)[:300]
    return False, "no controller responds: " + (", ".join(seen) or why or "none listed")


async def check(
    host: str,
    port: int,
    which: str,
    token: str | None,
    timeout: float,
    *,
    user: str | None = None,
) -> RestdAnswer:
    """`which` is "readyz" or "livez". Never raises: an unreachable slurmrestd is the answer."""
    deadline = time.monotonic() + timeout
    headers = auth_headers(token, user)

    def left() -> float:
        return max(deadline - time.monotonic(), 0.05)

    own = f"/{which}"
    try:
        r = await get(host, port, own, headers, left())
    except HttpError as exc:
        return RestdAnswer(False, f"slurmrestd at {host}:{port} unreachable: {exc}")
    if r.status == 401:
        return RestdAnswer(False, f"{own}: 401: slurmrestd refused the token ({_token_words(token)})", own)
    if r.status != 404 and not 200 <= r.status < 300:
        return RestdAnswer(False, f"{own}: {r.status}: {_words(r.body)}", own)
    # 404: a release before 26.05, without health paths; it answered, so it is live
    said = f"{own}: {r.status}" if r.status != 404 else f"{own}: 404 (release before 26.05)"
    if which == "livez":
        return RestdAnswer(True, f"{said}: slurmrestd answers", own)
    # 26.05's /readyz is 204 with every controller down (measured): it speaks for slurmrestd alone,
    # so readiness also needs a controller that responds behind it
    for version in PING_VERSIONS:
        path = f"/slurm/{version}/ping"
        try:
            r = await get(host, port, path, headers, left())
        except HttpError as exc:
            return RestdAnswer(False, f"{said}; {path}: {exc}", path)
        if r.status == 404:
            continue
        if r.status == 401:
            return RestdAnswer(
                False, f"{said}; {path}: 401: slurmrestd refused the token ({_token_words(token)})", path
            )
        ok, words = ping_verdict(r.body)
        if r.status != 200 and ok:
            ok, words = False, f"{r.status}: {words}"
        if not ok and r.status == 200 and AUTH_ERROR not in words:
            # before v0.0.45 a ping says "DOWN" for a controller that refused our token too: one
            # request that needs the token tells the two apart (asked only when the ping failed)
            words += await _refused(host, port, f"/slurm/{version}/diag", headers, left())
        return RestdAnswer(ok, f"{said}; {path}: {words}", path)
    return RestdAnswer(
        False, f"{said}; slurmrestd serves none of the ping versions {', '.join(PING_VERSIONS)}"
    )


async def _refused(host: str, port: int, path: str, headers: dict[str, str], timeout: float) -> str:
    """ " (slurmctld refused the token)" when a request through slurmrestd says so, else ""."""
    try:
        r = await get(host, port, path, headers, timeout)
    except HttpError:
        return ""
    return f" ({AUTH_ERROR}: slurmctld refused the token)" if AUTH_ERROR.encode() in r.body else ""


def _token_words(token: str | None) -> str:
    return "none presented" if not token else "invalid, expired, or root's/SlurmUser's"


def _words(body: bytes) -> str:
    return body[:300].decode("utf-8", "replace").strip() or "(no body)"
