"""A candidate set for slurmrestd judged before it is staged: config-sync's own checks of slurm.conf
as far as they concern a client of slurmctld (the text rules, included files, a PluginDir no config
volume fills, Slurm's own parse), and what slurmrestd needs on top: token authentication on, and its
JWT key inside the set, where slurmrestd will read it, and fit to be one (key.py).

No dry run and no job check: slurmrestd runs no job and keeps no state. What a config author can make
slurmrestd do is what slurm.conf says to any Slurm client: which controllers it talks to, and which
plugins it loads; a PluginDir inside a config volume or the target is refused (plugintrust.py), and a
jwt_key pointing anywhere but the staged key (another file slurmrestd's user can read) is refused too.
"""

from __future__ import annotations

from pathlib import Path

from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.judge.restart import RestartReason
from sidecars.configsync.judge.validate import MAX_REASON, Validator, Verdict
from sidecars.configsync.restd import key
from sidecars.runtime import offloop
from sidecars.slurm import daemons

JWT_AUTH = "auth/jwt"
RESTART = RestartReason("slurmrestd reads slurm.conf and its JWT key at start only", daemons.SLURMRESTD)


def _params(value: str) -> dict[str, str]:
    pairs = (p.partition("=") for p in value.split(",") if p.strip())
    return {k.strip().lower(): v.strip() for k, _, v in pairs}


def jwt_problems(conf: SlurmConf, files: FileSet, target: Path) -> list[str]:
    """Token authentication as slurmrestd needs it, and the key it names, staged from this set."""
    types = [t.strip().lower() for t in conf.options.get("authalttypes", "").split(",")]
    if JWT_AUTH not in types:
        return [
            f"AuthAltTypes does not include {JWT_AUTH}: slurmrestd -a rest_auth/jwt would refuse every token"
        ]
    named = _params(conf.options.get("authaltparameters", "")).get("jwt_key")
    if not named:
        return [
            "slurm.conf names no jwt_key (among the alternative authentication's parameters): "
            "slurmrestd would have no key"
        ]
    path = Path(named)
    if path.parent != target or path.name not in files.files:
        return [
            # the path is not said: what that option holds is redacted wherever it is shown
            f"the jwt_key slurm.conf names is not a file of this set staged in {target}: "
            "slurmrestd reads the key config-sync staged, no other file"
        ]
    return key.problems(path.name, files.files[path.name].data)


class RestdValidator(Validator):
    """Validator's checks that concern a client of slurmctld, and slurmrestd's own."""

    async def validate(self, files: FileSet, current: FileSet | None) -> Verdict:
        size = sum(e.size for e in files.files.values())
        read = await offloop.sized(size, self._read, files, None)
        if isinstance(read, Verdict):
            return read
        conf, _ = read
        problems = jwt_problems(conf, files, self.target)
        if problems:
            return Verdict(False, "; ".join(problems)[:MAX_REASON])
        refused, version = await self.client_parse(files)
        if refused or version is None:
            return Verdict(False, (refused or "Slurm's parser gave no version")[:MAX_REASON])
        return Verdict(True, "", (RESTART,), conf)
