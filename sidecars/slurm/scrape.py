"""slurmctld's own metrics (`MetricsType=metrics/openmetrics`, 25.11+): one endpoint read, and
what came of it in one word.

Measured on 26.05.5 (an HA pair, `tests/slurm/test_scrape.py`):
- the controller in control answers `/metrics` (an index) and `/metrics/{jobs,nodes,partitions,
  scheduler,jobs-users-accts}` with 200 and OpenMetrics text;
- a backup in standby answers every `/metrics*` with `303 See Other`, `Location:` the first
  `SlurmctldHost`'s address at `SlurmctldPort` with the same path, whoever asks: it is "standby",
  never a failure;
- behind `MetricsAuthUsers` (or `PrivateData`): 401 without a token (and for every token while
  `SlurmctldHttpAuthParameters` is unset), 403 for a user not listed; root, SlurmUser and the
  listed users get 200.

A redirect is input from the network. It is followed at most once, only to a controller of this
cluster: an http(s) URL of the scheme asked, a host that a `SlurmctldHost` line of our slurm.conf
names (as written: nothing is resolved), the port asked, and the very path asked, with no user
or password in it. Anything else is reported ("standby", with the Location refused and why) and
never fetched, so a token is never sent where it was not meant to go.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

import aiohttp

from sidecars.slurm.health import hint, one_line, slurm_error
from sidecars.slurm.httpauth import Credential, CredentialError

MAX_BYTES = 16 * 1024 * 1024  # a scrape at 1,000 nodes is well under this; more is cut and said
SEE_OTHER = 303


class ScrapeOutcome(StrEnum):
    OK = "ok"
    STANDBY = "standby"  # a backup's 303, followed to nothing usable or not followed
    UNAUTHORIZED = "unauthorized"  # 401: no token, a bad one, or Slurm checking none
    FORBIDDEN = "forbidden"  # 403: a token of a user MetricsAuthUsers does not list
    NO_CREDENTIAL = "no_credential"  # the credential given could not be read
    FAILED = "failed"  # anything else: unreachable, no HTTP, another status, too large


@dataclass(frozen=True, slots=True)
class Scrape:
    outcome: ScrapeOutcome
    detail: str
    text: str = ""  # the metrics, when OK
    url: str = ""  # where they were read (the primary's, when a standby's 303 was followed)


def refuse_location(asked: str, location: str, controllers: Collection[str]) -> str | None:
    """Why `location` (a standby's 303 to `asked`) must not be followed; None when it may."""
    a, to = urlsplit(asked), urlsplit(location)
    try:
        to_port = to.port
    except ValueError:
        return "its port is not a port"
    if to.scheme != a.scheme:
        return f"scheme {to.scheme or 'none'!r}, not {a.scheme!r}"
    if to.username is not None or to.password is not None:
        return "it carries a user or password"
    if to.hostname is None or to.hostname not in {c.lower() for c in controllers}:
        return f"host {to.hostname!r} is no SlurmctldHost of this cluster"
    if (to_port or 80) != (a.port or 80):
        return f"port {to_port} is not SlurmctldPort {a.port}"
    if (to.path, to.query) != (a.path, a.query) or to.fragment:
        return "it names another path"
    if (to.hostname, to_port) == (a.hostname, a.port):
        return "it names the controller asked"
    return None


async def scrape(
    session: aiohttp.ClientSession,
    url: str,
    *,
    controllers: Collection[str] = (),
    credential: Credential | None = None,
    follow: bool = True,
    timeout: float = 5.0,
    max_bytes: int = MAX_BYTES,
) -> Scrape:
    """GET `url` (slurmctld's `/metrics...`); never raises. `controllers`: the names and
    addresses a standby's redirect may lead to (`standby.host_addresses`)."""
    credential = credential or Credential()
    try:
        headers = credential.headers()
    except CredentialError as exc:
        return Scrape(ScrapeOutcome.NO_CREDENTIAL, str(exc))
    first = await _get(session, url, headers, timeout, max_bytes)
    if not isinstance(first, tuple):
        return first
    status, location, body = first
    if status != SEE_OTHER:
        return _judge(url, status, body, credential)
    if not location:
        return Scrape(ScrapeOutcome.STANDBY, f"{url}: 303 without a Location: a standby, not followed")
    why = refuse_location(url, location, controllers) if follow else "not asked to follow"
    if why is not None:
        return Scrape(ScrapeOutcome.STANDBY, f"{url}: a standby; its 303 to {location!r} not followed: {why}")
    then = await _get(session, location, headers, timeout, max_bytes)
    if not isinstance(then, tuple):  # the standby answered as one; what it names did not
        return Scrape(
            ScrapeOutcome.STANDBY, f"{url}: a standby; its 303 followed to {location}: {then.detail}"
        )
    status, _, body = then
    if status == SEE_OTHER:  # the one it names is a standby too (none in control): no second hop
        return Scrape(
            ScrapeOutcome.STANDBY, f"{url} and {location} both answer 303: no controller serves metrics"
        )
    judged = _judge(location, status, body, credential)
    return Scrape(judged.outcome, f"a standby's 303 followed: {judged.detail}", judged.text, judged.url)


async def _get(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], timeout: float, max_bytes: int
) -> tuple[int, str | None, str] | Scrape:
    try:
        async with session.get(
            url, headers=headers, allow_redirects=False, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as r:
            data = await r.content.read(max_bytes + 1)
            if len(data) > max_bytes:
                return Scrape(ScrapeOutcome.FAILED, f"{url}: more than {max_bytes} bytes: not read")
            return r.status, r.headers.get("Location"), data.decode(errors="replace")
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return Scrape(ScrapeOutcome.FAILED, f"{url}: {type(exc).__name__}: {exc}".rstrip(": "))


def _judge(url: str, status: int, body: str, credential: Credential) -> Scrape:
    if status == 200:
        return Scrape(ScrapeOutcome.OK, f"200 from {url}", body, url)
    said = slurm_error(body) or one_line(body, 200)
    if status == 401:
        return Scrape(
            ScrapeOutcome.UNAUTHORIZED,
            f"401 from {url} ({said}) to {credential.describe()}{hint(status, said)}",
        )
    if status == 403:
        return Scrape(
            ScrapeOutcome.FORBIDDEN,
            f"403 from {url} ({said}) to {credential.describe()}:"
            " not root, SlurmUser or a user MetricsAuthUsers lists",
        )
    return Scrape(ScrapeOutcome.FAILED, f"{status} from {url}" + (f": {said}" if said else ""))
