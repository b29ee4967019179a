"""`plan`'s flags (and `SIDECARS_*` environment) into one frozen dataclass."""

from __future__ import annotations

import argparse
import ssl
from pathlib import Path

from sidecars.configsync.dryrun.runner import IsolationSetting
from sidecars.protocol.configsync import ISOLATION_AUTO, ISOLATION_SETTINGS
from sidecars.runtime.http import CA_FILE
from sidecars.runtime.settings import (
    DIR,
    SHELL_WORDS,
    TOKEN_FILE,
    URL,
    ConfigError,
    add_flags,
    choice,
    declared,
    number,
    seconds,
    setting,
    values,
)
from sidecars.slurm.throwaway import SLURMCTLD


def configure(p: argparse.ArgumentParser) -> None:
    add_flags(p, PlanSettings)


@declared(kw_only=True)
class PlanSettings:
    filename: str = setting(
        flag="--filename",
        short="-f",  # kubectl's spelling, as the people who write these sets type it
        required=True,
        help="the candidate: a directory of files, a file of Kubernetes YAML (ConfigMaps, Secrets), "
        "or - for that YAML on stdin",
    )
    config_sync: str | None = setting(
        default=None,
        conv=URL,
        help="online: config-sync's URL (e.g. http://slurm-sidecars-config-sync:9100); "
        "without it the plan runs offline on the local Slurm",
    )
    token: str | None = setting(
        default=None,
        flag="--token-file",
        conv=TOKEN_FILE,
        help="online: the operator's token (a mounted Secret)",
    )
    tls: ssl.SSLContext | None = setting(
        default=None, flag="--ca-file", conv=CA_FILE, help="online: CA certificate(s) to trust for https"
    )
    against: str | None = setting(
        default=None,
        help="offline: the live set to compare with (a directory or YAML, as -f), e.g. the base branch's",
    )
    select: tuple[str, ...] = setting(
        default=(), multiple=True, help="in YAML, only the ConfigMaps and Secrets of these names"
    )
    output: str | None = setting(
        default=None,
        conv=choice("json", "markdown"),
        help="json, or markdown (the default when stdout is not a terminal; json otherwise)",
    )
    target: Path = setting(
        default=Path("/etc/slurm"), conv=DIR, help="where the files live when deployed (includes name it)"
    )
    main_file: str = setting(default="slurm.conf", help="the main file of the set")
    slurmctld: tuple[str, ...] = setting(
        default=SLURMCTLD, conv=SHELL_WORDS, help="offline: the command that starts the local slurmctld"
    )
    plugin_dir: Path | None = setting(
        default=None,
        conv=DIR,
        help="offline: where the local Slurm's plugins are (default: the set's PluginDir)",
    )
    isolation: IsolationSetting = setting(
        default=ISOLATION_AUTO,
        conv=choice(*ISOLATION_SETTINGS),
        help="offline: the dry run's isolation (netns needs CAP_SYS_ADMIN; auto: netns if allowed)",
    )
    timeout_seconds: float = setting(
        default=30.0, conv=seconds(), help="give up on the dry run after this long"
    )
    max_file_bytes: int = setting(
        default=1024 * 1024, conv=number(unit="bytes"), help="refuse a file larger than this"
    )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> PlanSettings:
        if args.config_sync and not args.token_file:
            raise ConfigError("--config-sync needs --token-file (the operator's token)")
        if args.token_file and not args.config_sync:
            raise ConfigError("--token-file is only used with --config-sync")
        if args.config_sync and args.against:
            raise ConfigError("--against is offline's live set; online, config-sync's live set is compared")
        given = values(cls, args)
        if given.get("select") and given["filename"] != "-" and Path(given["filename"]).is_dir():
            raise ConfigError("--select picks ConfigMaps and Secrets out of YAML, not files of a directory")
        return cls(**given)
