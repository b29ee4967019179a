"""config-sync's settings: flags (each also from `SIDECARS_*`) into one frozen dataclass."""

from __future__ import annotations

import argparse
import ipaddress
import shlex
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sidecars.configsync.jobs import FORCE_FILE
from sidecars.runtime import http
from sidecars.runtime.settings import ConfigError, flag, parse_addr, positive, read_token
from sidecars.slurm.throwaway import SLURMCTLD

RestartPolicy = Literal["hold", "restart"]
DryRunIsolation = Literal["auto", "netns", "ports"]


@dataclass(frozen=True, slots=True)
class Settings:
    sources: tuple[Path, ...]
    target: Path
    state_dir: Path
    http_host: str = "127.0.0.1"
    http_port: int = 0
    debounce_seconds: float = 0.1  # a lone change; a burst's quiet time grows from here
    debounce_max_seconds: float = 5.0  # a storm that never goes quiet is still applied after this
    rehash_seconds: float = 30.0
    settle_seconds: float = 5.0
    max_file_bytes: int = 1024 * 1024
    restart_policy: RestartPolicy = "hold"
    restart_timeout_seconds: float = 60.0
    retry_max_seconds: float = 10.0  # backoff ceiling while the controller is unreachable
    parse_timeout_seconds: float = 10.0
    plugin_dir: Path | None = None  # None: the PluginDir slurmctld reports
    main_file: str = "slurm.conf"
    dry_run: bool = True  # every candidate tried by a throwaway slurmctld before the live one sees it
    dry_run_slurmctld: tuple[str, ...] = SLURMCTLD  # how to start slurmctld of the live release
    dry_run_isolation: DryRunIsolation = "auto"
    dry_run_state_dir: Path | None = None  # None: the StateSaveLocation the applied set names
    # 0: answering on its port already proves what slurmctld initialises once primary; waiting
    # longer buys only that many more seconds of a first scheduler pass, paid by every change
    dry_run_stay_seconds: float = 0.0
    dry_run_timeout_seconds: float = 15.0
    allow_job_loss: bool = False  # apply changes that would end or requeue jobs anyway
    history_limit: int = 20  # generations kept (with their diffs) for /history
    secret_sources: tuple[Path, ...] = ()  # Secret volumes among `sources`: contents never shown
    viewer_token: str | None = None  # /status and /history need it; None: served on loopback only
    http_limits: http.ServerLimits = field(default_factory=http.ServerLimits)
    tls: ssl.SSLContext | None = None


def configure(p: argparse.ArgumentParser) -> None:
    flag(
        p,
        "--source",
        required=True,
        multiple=True,
        metavar="DIR",
        help="a ConfigMap/Secret volume or plain directory (repeat for several)",
    )
    flag(
        p,
        "--secret-source",
        multiple=True,
        default=[],
        metavar="DIR",
        help="a Secret volume: a source whose files' contents are never shown (history, logs, Events)",
    )
    flag(
        p,
        "--viewer-token-file",
        default=None,
        help="read-only token that /status and /history require; without it --http must be loopback",
    )
    http.configure_limits(p)
    http.configure_tls(p)
    flag(p, "--target", required=True, metavar="DIR", help="the directory slurmctld reads")
    flag(
        p,
        "--state-dir",
        default=None,
        metavar="DIR",
        help="where the last known good set is kept (default: TARGET/../.config-sync)",
    )
    flag(p, "--http", required=True, metavar="ADDR", help="HOST:PORT for /livez /readyz /metrics /status")
    flag(
        p,
        "--debounce-seconds",
        default="0.1",
        help="quiet time that ends a lone change; doubled by each further change of a burst, up to 1 s",
    )
    flag(p, "--debounce-max-seconds", default="5", help="apply a change storm after at most this long")
    flag(p, "--rehash-seconds", default="30", help="re-hash the sources this often, events or not")
    flag(p, "--settle-seconds", default="5", help="slurmctld must keep answering this long after a change")
    flag(p, "--max-file-bytes", default=str(1024 * 1024), help="reject files larger than this")
    flag(
        p,
        "--restart-policy",
        default="hold",
        choices=["hold", "restart"],
        help="restart-required changes: hold the last known good, or restart slurmctld",
    )
    flag(p, "--restart-timeout-seconds", default="60", help="how long slurmctld may take to come back")
    flag(
        p,
        "--history-limit",
        default="20",
        help="config generations kept, with their diffs, for GET /history (in memory)",
    )
    flag(p, "--main-file", default="slurm.conf", help="the file the Slurm daemon reads (SLURM_CONF)")
    flag(
        p,
        "--plugin-dir",
        default=None,
        metavar="DIR",
        help="slurmctld's plugins as seen here (default: its PluginDir); unknown plugin names are refused",
    )

    flag(
        p,
        "--dry-run",
        default="on",
        choices=["on", "off"],
        help="try each candidate on a throwaway slurmctld (same release, state in step) before applying it",
    )
    flag(
        p,
        "--dry-run-slurmctld",
        default=shlex.join(SLURMCTLD),
        metavar="CMD",
        help="the command that starts this release's slurmctld (split like a shell would)",
    )
    flag(
        p,
        "--dry-run-isolation",
        default="auto",
        choices=["auto", "netns", "ports"],
        help="netns: a network namespace (CAP_SYS_ADMIN); ports: closed ports only; auto: netns if allowed",
    )
    flag(
        p,
        "--dry-run-state-dir",
        default=None,
        metavar="DIR",
        help="slurmctld's StateSaveLocation as seen here (default: the path slurm.conf names)",
    )
    flag(
        p, "--dry-run-stay-seconds", default="0", help="the throwaway must stay up this long once it answers"
    )
    flag(p, "--dry-run-timeout-seconds", default="15", help="give up on a throwaway not primary by then")
    flag(
        p,
        "--allow-job-loss",
        default="no",
        choices=["yes", "no"],
        help=f"apply changes that would end or requeue jobs (per change: a {FORCE_FILE} key naming who)",
    )


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def from_args(args: argparse.Namespace) -> Settings:
    secret_sources = tuple(Path(s).absolute() for s in (args.secret_source or []))
    sources = tuple(Path(s).absolute() for s in (args.source or [])) + secret_sources
    if not sources:
        raise ConfigError("--source: at least one directory is required")
    for s in sources:
        if not s.is_dir():
            raise ConfigError(f"--source: {s} is not a directory")
    target = Path(args.target).absolute()
    if target in sources:
        raise ConfigError("--target must not be one of the --source directories")
    # a Kubernetes emptyDir for the target may be mounted above it: config-sync makes the directory
    # itself, but a parent that is missing means a wrong path, not a fresh volume
    if target.exists() and not target.is_dir():
        raise ConfigError(f"--target: {target} is not a directory")
    if not target.exists() and not target.parent.is_dir():
        raise ConfigError(f"--target: neither {target} nor its parent {target.parent} is a directory")
    state_dir = Path(args.state_dir).absolute() if args.state_dir else target.parent / ".config-sync"
    if state_dir == target or target in state_dir.parents:
        raise ConfigError("--state-dir must lie outside --target")
    host, port = parse_addr(args.http)
    viewer = read_token(args.viewer_token_file, "--viewer-token-file") if args.viewer_token_file else None
    if viewer is None and not _loopback(host):
        raise ConfigError(
            f"--http {args.http}: /status and /history show the config: give --viewer-token-file, "
            "or serve on 127.0.0.1 only"
        )
    if args.restart_policy not in ("hold", "restart"):
        raise ConfigError(f"--restart-policy: hold or restart, got {args.restart_policy!r}")
    main_file = str(args.main_file)
    if "/" in main_file or main_file.startswith(".."):
        raise ConfigError(f"--main-file: a plain file name is expected, got {main_file!r}")
    plugin_dir = Path(args.plugin_dir).absolute() if args.plugin_dir else None
    if plugin_dir is not None and not plugin_dir.is_dir():
        raise ConfigError(f"--plugin-dir: {plugin_dir} is not a directory")
    try:
        slurmctld = tuple(shlex.split(str(args.dry_run_slurmctld)))
    except ValueError as exc:
        raise ConfigError(f"--dry-run-slurmctld: {exc}") from None
    if not slurmctld:
        raise ConfigError("--dry-run-slurmctld: a command is required")
    dry_state = Path(args.dry_run_state_dir).absolute() if args.dry_run_state_dir else None
    return Settings(
        sources=sources,
        target=target,
        state_dir=state_dir,
        http_host=host,
        http_port=port,
        debounce_seconds=positive(args.debounce_seconds, "--debounce-seconds", allow_zero=True),
        debounce_max_seconds=positive(args.debounce_max_seconds, "--debounce-max-seconds"),
        rehash_seconds=positive(args.rehash_seconds, "--rehash-seconds"),
        settle_seconds=positive(args.settle_seconds, "--settle-seconds", allow_zero=True),
        max_file_bytes=int(positive(args.max_file_bytes, "--max-file-bytes", conv=int)),
        restart_policy=args.restart_policy,
        restart_timeout_seconds=positive(args.restart_timeout_seconds, "--restart-timeout-seconds"),
        main_file=main_file,
        plugin_dir=plugin_dir,
        dry_run=args.dry_run == "on",
        dry_run_slurmctld=slurmctld,
        dry_run_isolation=args.dry_run_isolation,
        dry_run_state_dir=dry_state,
        dry_run_stay_seconds=positive(args.dry_run_stay_seconds, "--dry-run-stay-seconds", allow_zero=True),
        dry_run_timeout_seconds=positive(args.dry_run_timeout_seconds, "--dry-run-timeout-seconds"),
        allow_job_loss=args.allow_job_loss == "yes",
        history_limit=int(positive(args.history_limit, "--history-limit", conv=int)),
        secret_sources=secret_sources,
        viewer_token=viewer,
        http_limits=http.limits_from(args),
        tls=http.tls_from(args),
    )
