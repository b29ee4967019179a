"""What the agent reads, runs on and trusts lies where a job's user cannot write.

Jobs run as ordinary uids in the slurmd container, which shares the pod's volumes with the agent,
and the kubelet makes every emptyDir 0777. The agent therefore refuses a socket, state or GPU
mapping directory that any uid but root and its own could change (at start, exit 2), and runs no
Slurm command while SLURM_CONF lies where one could plant a config (its PluginDir would load their
code as the SlurmUser). The manifests' init step gives those volumes their owners and modes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import structlog

from sidecars.runtime.settings import ConfigError
from sidecars.runtime.trustedpath import Trust, UntrustedPath
from sidecars.slurm import SlurmCommandError

log = structlog.get_logger(__name__)


def check_dirs(dirs: Mapping[str, Path], trust: Trust | None = None) -> None:
    """Each named directory (flag -> path) is trusted, or a ConfigError names the flag and why."""
    trust = trust or Trust.ours()
    for what, path in dirs.items():
        try:
            trust.check_dir(path)
        except UntrustedPath as exc:
            raise ConfigError(f"{what}: {path} is not safe from other users: {exc}") from None


def conf_guard(env: Mapping[str, str], trust: Trust | None = None) -> Callable[[Sequence[str]], None]:
    """A SlurmClient guard: refuse every command while SLURM_CONF (when set) is not trusted.
    Checked before each command, not once: slurmd creates the configless files after we start."""
    checker = trust or Trust.ours()
    conf = env.get("SLURM_CONF")

    def guard(argv: Sequence[str]) -> None:
        if not conf:
            return
        try:
            checker.check_file(conf)
        except UntrustedPath as exc:
            log.warning("slurm_conf_untrusted", path=conf, problem=str(exc))
            why = f"refused: SLURM_CONF {conf} is not safe from other users: {exc}"
            raise SlurmCommandError(argv, why) from None

    return guard
