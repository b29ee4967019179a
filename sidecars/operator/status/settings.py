"""`status`'s flags (and `SIDECARS_*` environment) into one frozen dataclass."""

from __future__ import annotations

import argparse
import ssl
from dataclasses import dataclass

from sidecars.runtime.http import client_tls
from sidecars.runtime.settings import ConfigError, flag, http_url, positive, read_token


def configure(p: argparse.ArgumentParser) -> None:
    flag(
        p,
        "--control-plane",
        help="control-plane URL, e.g. http://slurm-sidecars-control-plane:9200; "
        "without it Slurm is read directly",
    )
    flag(
        p,
        "--token-file",
        help="the viewer's (or operator's) token for the control plane and config-sync (a mounted Secret)",
    )
    flag(p, "--config-sync", help="config-sync URL, e.g. http://127.0.0.1:9100, for the config generation")
    flag(p, "--ca-file", default=None, help="CA certificate(s) to trust for https sources")
    flag(p, "--timeout-seconds", default="5", help="give up on a source after this long")


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusSettings:
    control_plane: str | None
    token: str | None
    config_sync: str | None
    timeout: float
    tls: ssl.SSLContext | None = None  # None: the system's CAs

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> StatusSettings:
        urls = {
            name: http_url(getattr(args, name), f"--{name.replace('_', '-')}")
            for name in ("control_plane", "config_sync")
            if getattr(args, name) is not None
        }
        if args.control_plane and not args.token_file:
            raise ConfigError("--control-plane needs --token-file")
        if args.token_file and not (args.control_plane or args.config_sync):
            raise ConfigError("--token-file is only used with --control-plane or --config-sync")
        token = read_token(args.token_file) if args.token_file else None
        return cls(
            control_plane=urls.get("control_plane"),
            token=token,
            config_sync=urls.get("config_sync"),
            timeout=positive(args.timeout_seconds, "--timeout-seconds"),
            tls=client_tls(args.ca_file),
        )
