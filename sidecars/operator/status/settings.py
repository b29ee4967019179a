"""`status`'s flags (and `SIDECARS_*` environment) into one frozen dataclass."""

from __future__ import annotations

import argparse
import ssl

from sidecars.runtime.http import CA_FILE
from sidecars.runtime.settings import (
    TOKEN_FILE,
    URL,
    ConfigError,
    add_flags,
    declared,
    seconds,
    setting,
    values,
)


def configure(p: argparse.ArgumentParser) -> None:
    add_flags(p, StatusSettings)


@declared(kw_only=True)
class StatusSettings:
    control_plane: str | None = setting(
        default=None,
        conv=URL,
        help="control-plane URL, e.g. http://slurm-sidecars-control-plane:9200; "
        "without it Slurm is read directly",
    )
    token: str | None = setting(
        default=None,
        flag="--token-file",
        conv=TOKEN_FILE,
        help="the viewer's (or operator's) token for the control plane and config-sync (a mounted Secret)",
    )
    config_sync: str | None = setting(
        default=None, conv=URL, help="config-sync URL, e.g. http://127.0.0.1:9100, for the config generation"
    )
    timeout_seconds: float = setting(default=5.0, conv=seconds(), help="give up on a source after this long")
    tls: ssl.SSLContext | None = setting(
        # None: the system's CAs
        default=None,
        flag="--ca-file",
        conv=CA_FILE,
        help="CA certificate(s) to trust for https sources",
    )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> StatusSettings:
        if args.control_plane and not args.token_file:
            raise ConfigError("--control-plane needs --token-file")
        if args.token_file and not (args.control_plane or args.config_sync):
            raise ConfigError("--token-file is only used with --control-plane or --config-sync")
        return cls(**values(cls, args))  # the URLs are checked before the token is read
