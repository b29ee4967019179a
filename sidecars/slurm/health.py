"""Slurm's own health endpoints: from 25.11 slurmctld and slurmd answer `GET /livez` and `/readyz`
on their ports (measured on 26.05: 204 No Content when well; `CommunicationParameters=disable_http`
turns them off). Older releases have nothing there, so callers fall back to what Slurm's commands
say. This is a Slurm edge like the commands are: the only place we speak HTTP to Slurm's daemons
(with `scrape`, which reads slurmctld's `/metrics`).

`/readyz?verbose` adds Slurm's own words (measured on 26.05.5: `primary:T`/`primary:F`, the
reconfigure and worker state). From 26.05 slurmctld answers it only to root's or SlurmUser's JWT
(`httpauth`): 401 without one, or with any one while `SlurmctldHttpAuthParameters` is unset; 500
"Rejecting authentication of user nobody" for a token of a user it does not know. `readiness`
asks it where it has a credential, and otherwise, or when refused, decides by the plain `/readyz`
and says why (`Readiness.degraded`): never a failure of the daemon for a refusal of ours.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

import aiohttp

from sidecars.slurm.httpauth import Credential, CredentialError
from sidecars.slurm.models import Version

FIRST = (25, 11)
VERBOSE_AUTH = (26, 5)  # /readyz?verbose needs root's or SlurmUser's token from this release
MAX_WORDS = 1024  # Slurm's verbose words kept (a few lines on 26.05.5); the rest is cut
# how Slurm's HTTP servers open an error of theirs (src/slurmctld/http.c, src/slurmd/slurmd/http.c),
# which a 500 of a not-ready daemon (its probe words) does not
ERROR_OPENINGS = ("slurmctld HTTP server request for", "slurmd HTTP server request for")


def served(version: Version, comm_params: str = "") -> bool:
    """Whether daemons of this release (with this CommunicationParameters) answer /livez, /readyz."""
    return version.at_least(*FIRST) and "disable_http" not in comm_params.lower()


@dataclass(frozen=True, slots=True)
class Answer:
    ok: bool
    detail: str  # "204 from http://..." or why it failed
    # True: an HTTP answer came (any status); False: the daemon took the connection and dropped it
    # without one (Slurm's own protocol: no HTTP here); None: nothing learnt (refused, timed out)
    http: bool | None = None


async def probe(
    session: aiohttp.ClientSession, host: str, port: int, path: str = "/readyz", timeout: float = 2.0
) -> Answer:
    """One GET of a daemon's health endpoint; never raises (an unreachable daemon is the answer)."""
    url = f"http://{host}:{port}{path}"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            return Answer(200 <= r.status < 300, f"{r.status} from {url}", http=True)
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientResponseError) as exc:
        return Answer(False, f"{url}: {type(exc).__name__}: {exc}".rstrip(": "), http=False)
    except aiohttp.ClientOSError as exc:
        # measured: 24.11's slurmd resets the connection, its slurmctld closes it (both: no HTTP)
        dropped = exc.errno == errno.ECONNRESET
        return Answer(False, f"{url}: {type(exc).__name__}: {exc}", http=False if dropped else None)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return Answer(False, f"{url}: {type(exc).__name__}: {exc}".rstrip(": "))


@dataclass(frozen=True, slots=True)
class Readiness:
    answer: Answer  # the verdict: from the verbose read, or the plain one when that was not had
    words: str | None = None  # Slurm's own words from /readyz?verbose, on one line, bounded
    degraded: str | None = None  # why the plain /readyz decided (None: the verbose one did)


def verbose_needs_auth(version: Version) -> bool:
    return version.at_least(*VERBOSE_AUTH)


def one_line(text: str, cap: int = MAX_WORDS) -> str:
    words = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return words if len(words) <= cap else words[:cap] + "..."


def slurm_error(body: str) -> str | None:
    """Slurm's "Failed: ..." words when `body` is an error of its HTTP server, else None."""
    if not body.startswith(ERROR_OPENINGS):
        return None
    failed = [ln.strip() for ln in body.splitlines() if ln.strip().startswith("Failed:")]
    return failed[0].removeprefix("Failed:").strip() if failed else one_line(body, 200)


async def readiness(
    session: aiohttp.ClientSession,
    host: str,
    port: int,
    credential: Credential | None = None,
    *,
    needs_auth: bool = False,
    timeout: float = 2.0,
) -> Readiness:
    """The daemon's readiness with its own words where it gives them to us; never raises.

    `needs_auth`: the daemon answers /readyz?verbose only to a credential (slurmctld from 26.05);
    without one it is not asked, and the plain /readyz decides, saying so."""
    credential = credential or Credential()
    headers: dict[str, str] = {}
    why: str | None = None
    try:
        headers = credential.headers()
    except CredentialError as exc:
        why = f"{exc}: plain /readyz"
    if why is None and needs_auth and not headers:
        why = "no credential for /readyz?verbose (from 26.05 root's or SlurmUser's JWT only): plain /readyz"
    if why is None:
        url = f"http://{host}:{port}/readyz?verbose"
        try:
            async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                body = (await r.content.read(MAX_WORDS * 4)).decode(errors="replace")
                status = r.status
        except (aiohttp.ClientError, TimeoutError, OSError):
            return Readiness(await probe(session, host, port, "/readyz", timeout))  # says why, as before
        refused = slurm_error(body)
        if refused is None and (200 <= status < 300 or status == 500):
            detail = f"{status} from http://{host}:{port}/readyz"
            words = one_line(body) or None
            # 26.05's slurmd keeps its words to itself under PrivateData (204, no body; measured)
            quiet = None if words else "/readyz?verbose gave no words (slurmd gives none under PrivateData)"
            return Readiness(Answer(200 <= status < 300, detail, http=True), words, quiet)
        why = (
            f"/readyz?verbose answered {status}"
            + (f" ({refused})" if refused else "")
            + f" to {credential.describe()}"
            + hint(status, refused)
            + ": plain /readyz"
        )
    return Readiness(await probe(session, host, port, "/readyz", timeout), degraded=why)


INVALID = "Invalid authentication credential"  # Slurm's words for a 401 it cannot tell more of


def hint(status: int, refused: str | None) -> str:
    """What a refusal of Slurm's likely means, for the one who reads the reason."""
    if status == 401 and refused in (None, INVALID):
        return (
            "; a bad or missing token, or SlurmctldHttpAuthParameters=jwt_key=FILE unset (then every one is)"
        )
    if status in (403, 500):
        return "; only root's and SlurmUser's tokens are taken"
    return ""
