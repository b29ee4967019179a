"""Slurm's own health endpoints: from 25.11 slurmctld and slurmd answer `GET /livez` and `/readyz`
on their ports (measured on 26.05: 204 No Content when well; `CommunicationParameters=disable_http`
turns them off). Older releases have nothing there, so callers fall back to what Slurm's commands
say. This is a Slurm edge like the commands are: the only place we speak HTTP to Slurm's daemons.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

import aiohttp

from sidecars.slurm.models import Version

FIRST = (25, 11)


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
