"""slurmdbd's own release, as slurmdbd reports it: `sacctmgr show config` asks the daemon for its
configuration (DBD_GET_CONFIG), and its answer carries `SLURMDBD_VERSION`. An upgrade's preflight
reads it: slurmdbd must be upgraded first, so its release bounds every other daemon's."""

from __future__ import annotations

from sidecars.slurm.client import SlurmClient
from sidecars.slurm.errors import SlurmParseError
from sidecars.slurm.models import Version


def parse_dbd_version(text: str) -> Version:
    """The `SLURMDBD_VERSION = 26.05.5` line of `sacctmgr show config`."""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "SLURMDBD_VERSION" and value.strip()[:1].isdigit():
            return Version.parse(value)
    raise SlurmParseError(["sacctmgr", "show", "config"], "no SLURMDBD_VERSION in its answer")


async def slurmdbd_version(client: SlurmClient) -> Version:
    """The running slurmdbd's release; SlurmError when it does not answer (or this client's
    release is one it refuses: a slurmdbd refuses clients too old for it)."""
    done = await client.run("sacctmgr", "show", "config")
    return parse_dbd_version(done.stdout)
