"""config-sync's settings: flags (each also from `SIDECARS_*`) into one frozen dataclass."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import ssl
from pathlib import Path
from typing import Literal

from sidecars.configsync import peers as ha_peers
from sidecars.configsync.tokenwatch import TokenWatchSettings
from sidecars.protocol.configsync import FORCE_FILE, ISOLATION_AUTO, ISOLATION_SETTINGS
from sidecars.runtime import http
from sidecars.runtime.looplag import LoopLagSettings
from sidecars.runtime.settings import (
    ADDRESS,
    BOOL,
    DIR,
    PATH,
    SHELL_WORDS,
    TOKEN_FILE,
    ConfigError,
    add_flags,
    choice,
    declared,
    number,
    seconds,
    setting,
    settings_of,
    values,
)
from sidecars.slurm import daemons
from sidecars.slurm.dbd_throwaway import SLURMDBD
from sidecars.slurm.throwaway import SLURMCTLD

Daemon = str  # one of daemons.DAEMONS
RestartPolicy = Literal["hold", "restart"]


# the kernel's tables of TCP sockets in the pod's network namespace, where slurmrestd's open
# connections are counted (restd/inflight.py)
PORT_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


@declared()
class DrainSettings:
    port: int = setting(
        default=6820,
        flag="--restd-port",
        conv=number(most=65535),
        help="with --daemon slurmrestd: slurmrestd's port in this pod (its open connections are waited out "
        "before a restart)",
    )
    settle_seconds: float = setting(
        default=5.0,
        flag="--restd-unready-seconds",
        conv=seconds(zero_ok=True),
        help="with --daemon slurmrestd: how long the pod is not ready before the connections are counted "
        "(the Service's endpoints dropping it)",
    )
    drain_seconds: float = setting(
        default=60.0,
        flag="--restd-drain-seconds",
        conv=seconds(zero_ok=True),
        help="with --daemon slurmrestd: the longest wait for slurmrestd's open connections to end before "
        "it is restarted anyway (those left are counted and logged)",
    )
    uid: int | None = setting(
        default=None,
        flag="--restd-uid",
        conv=number(zero_ok=True),
        help="with --daemon slurmrestd: the user the staged files belong to, when config-sync runs as root "
        "(default: config-sync's own user, as in slurmrestd's pod, where it runs as slurmrestd's)",
    )
    turn_lease: str | None = setting(
        default=None,
        flag="--restd-turn-lease",
        help="with --daemon slurmrestd: the Lease (in $POD_NAMESPACE) whose holder alone may drain and "
        "restart its slurmrestd: replicas take turns, so the Service keeps a ready endpoint while a change "
        "rolls through (default: no turns; a single replica, or no Kubernetes)",
    )
    turn_lease_seconds: float = setting(
        default=30.0,
        flag="--restd-turn-lease-seconds",
        conv=seconds(),
        help="with --restd-turn-lease: the turn's duration, renewed every third of it while held; a replica "
        "that dies holding the turn is passed by once it has not been renewed this long",
    )
    log_file: Path | None = setting(
        default=None,
        flag="--restd-log-file",
        conv=PATH,
        help="with --daemon slurmrestd: the file slurmrestd's container writes slurmrestd's output to: a "
        "slurmrestd that refuses to start on a new set is told at once, in its own words, and the set "
        "rolled back (default: none; such a set is rolled back after --restart-timeout-seconds)",
    )
    restart_timeout_seconds: float = 120.0  # stopped -> a new slurmrestd answers (the kubelet's restart)
    # the longest wait for one HTTP answer from a late slurmrestd (a loaded node), each try
    late_answer_seconds: float = 30.0
    turn_poll_seconds: float = 1.0  # a waiting replica reads the turn's Lease this often
    poll_seconds: float = 0.1
    tables: tuple[Path, ...] = PORT_TABLES


@declared()
class Settings:
    sources: tuple[Path, ...] = setting(  # the --secret-source ones too, last
        flag="--source",
        conv=DIR,
        required=True,
        multiple=True,
        help="a ConfigMap/Secret volume or plain directory (repeat for several)",
    )
    target: Path = setting(conv=DIR, required=True, help="the directory slurmctld reads")
    state_dir: Path = setting(
        conv=DIR, help="where the last known good set is kept (default: TARGET/../.config-sync)"
    )
    http_address: tuple[str, int] = setting(
        flag="--http", conv=ADDRESS, required=True, help="HOST:PORT for /livez /readyz /metrics /status"
    )
    # an absolute Include names the target as slurmctld's container mounts it; where this container
    # mounts the same volume elsewhere, such an Include must still count as a file of the set
    target_read_at: Path | None = setting(
        default=None,
        conv=DIR,
        help="the path at which slurmctld reads --target, where its container mounts that volume "
        "elsewhere (default: --target); an absolute Include of the set names this path",
    )
    debounce_seconds: float = setting(  # a lone change; a burst's quiet time grows from here
        default=0.1,
        conv=seconds(zero_ok=True),
        help="quiet time that ends a lone change of files written one by one (a kubelet volume's atomic "
        "swap needs none); doubled by each further change of a burst, up to 1 s",
    )
    debounce_max_seconds: float = setting(
        default=5.0, conv=seconds(), help="apply a change storm after at most this long"
    )
    rehash_seconds: float = setting(
        default=30.0, conv=seconds(), help="re-hash the sources this often, events or not"
    )
    settle_seconds: float = setting(
        default=5.0, conv=seconds(zero_ok=True), help="slurmctld must keep answering this long after a change"
    )
    # measured: a worker registers again within 0.6 s of a reconfigure (24.11, 26.05; idle machine);
    # 10 s leaves a loaded node 15x that. Spent only on a worker not registered yet
    registration_seconds: float = setting(
        default=10.0,
        conv=seconds(),
        help="how long workers may take to register again after a change (and after its rollback) "
        "before they are judged: unregistered ones are named, drains the change caused are undone",
    )
    max_file_bytes: int = setting(
        default=1024 * 1024, conv=number(unit="bytes"), help="reject files larger than this"
    )
    restart_policy: RestartPolicy = setting(
        default="hold",
        conv=choice("hold", "restart"),
        help="restart-required changes: hold the last known good, or restart slurmctld",
    )
    restart_timeout_seconds: float = setting(
        default=60.0, conv=seconds(), help="how long slurmctld (or slurmdbd) may take to come back"
    )
    retry_max_seconds: float = 10.0  # backoff ceiling while the controller is unreachable
    parse_timeout_seconds: float = 10.0
    plugin_dir: Path | None = setting(  # None: the PluginDir slurmctld reports
        default=None,
        conv=DIR,
        help="slurmctld's plugins as seen here (default: its PluginDir); unknown plugin names are refused",
    )
    # slurmdbd: the set is slurmdbd.conf from its Secret (configsync/slurmdbd/sync.py)
    daemon: Daemon = setting(
        default=daemons.SLURMCTLD,
        conv=choice(*daemons.DAEMONS),
        help="the Slurm daemon the files are for: slurmctld (slurm.conf...), slurmdbd (slurmdbd.conf) "
        "or slurmrestd (slurm.conf and its JWT key)",
    )
    main_file: str = setting(
        default="slurm.conf", help="the file the Slurm daemon reads (SLURM_CONF; slurmdbd.conf for slurmdbd)"
    )
    slurmdbd_command: tuple[str, ...] = setting(
        default=SLURMDBD,
        conv=SHELL_WORDS,
        help="the command that runs this release's slurmdbd, for its own reading of a candidate file",
    )
    dry_run: bool = setting(
        default=True,
        conv=BOOL,
        help="try each candidate on a throwaway slurmctld (same release, state in step) before applying it",
    )
    dry_run_slurmctld: tuple[str, ...] = setting(
        default=SLURMCTLD,
        conv=SHELL_WORDS,
        help="the command that starts this release's slurmctld (split like a shell would)",
    )
    dry_run_isolation: str = setting(
        default=ISOLATION_AUTO,
        conv=choice(*ISOLATION_SETTINGS),
        help="netns: a network namespace (CAP_SYS_ADMIN); ports: closed ports only; auto: netns if allowed",
    )
    dry_run_state_dir: Path | None = setting(  # None: the StateSaveLocation the applied set names
        default=None,
        conv=DIR,
        help="slurmctld's StateSaveLocation as seen here (default: the path slurm.conf names)",
    )
    # 0: answering on its port already proves what slurmctld initialises once primary; waiting
    # longer buys only that many more seconds of a first scheduler pass, paid by every change
    dry_run_stay_seconds: float = setting(
        default=0.0, conv=seconds(zero_ok=True), help="the throwaway must stay up this long once it answers"
    )
    # the shadow of the state is built when config-sync starts and brought in step this often after,
    # off any change's path (a sync at rest lists and copies nothing); 0: only when a dry run needs it
    dry_run_state_sync_seconds: float = setting(
        default=5.0,
        conv=seconds(zero_ok=True),
        help="keep the dry run's copy of the state in step this often between changes (0: by dry runs only)",
    )
    dry_run_timeout_seconds: float = setting(
        default=15.0, conv=seconds(), help="give up on a throwaway not primary by then"
    )
    allow_job_loss: bool = setting(
        default=False,
        conv=BOOL,
        help=f"apply changes that would end or requeue jobs (per change: a {FORCE_FILE} key naming who)",
    )
    history_limit: int = setting(
        default=20,
        conv=number(unit="generations"),
        help="config generations kept, with their diffs, for GET /history (in memory)",
    )
    secret_sources: tuple[Path, ...] = setting(  # Secret volumes among `sources`: contents never shown
        default=(),
        flag="--secret-source",
        conv=DIR,
        multiple=True,
        help="a Secret volume: a source whose files' contents are never shown (history, logs, Events)",
    )
    viewer_token: str | None = setting(  # /status and /history need it; None: served on loopback only
        default=None,
        flag="--viewer-token-file",
        conv=TOKEN_FILE,
        help="read-only token that /status and /history require; without it --http must be loopback",
    )
    operator_token: str | None = setting(  # None: POST /v1/plan is not served
        default=None,
        flag="--operator-token-file",
        conv=TOKEN_FILE,
        help="the operator's token that POST /v1/plan requires; without it plans are not served",
    )
    # HA (configsync/ha/coordination.py): one config-sync per controller pod; the one beside the controller in
    # control applies, the others stage what it verified
    peers: tuple[str, ...] = setting(
        default=(),
        flag="--peer",
        multiple=True,
        help="URL of another controller pod's config-sync (repeat for each); asked with the viewer token",
    )
    peer_tls: ssl.SSLContext | None = setting(  # None: the system's roots; certificates checked either way
        default=None,
        flag="--peer-ca-file",
        conv=http.CA_FILE,
        help="with https:// peers: trust the CAs in this file (PEM) for their certificates",
    )
    pod_name: str | None = setting(  # a StatefulSet's pods share one --peer list: this pod is left out
        default=None,
        help="with --peer: this pod's name (the downward API's metadata.name); the peer whose host "
        "is this name, or starts with it and a dot, is this pod itself and is not asked",
    )
    controller: str | None = setting(  # None: this host's short name, as slurmctld finds its entry
        default=None, help="with --peer: this pod's SlurmctldHost name (default: the host's short name)"
    )
    ha_poll_seconds: float = setting(
        default=1.0, conv=seconds(), help="with --peer: how often a waiting standby asks its peers again"
    )
    ha_catch_up_seconds: float = setting(
        default=60.0,
        conv=seconds(),
        help="with --peer: a set every peer does not hold this long after this pod took it is "
        "reported as not everywhere (a Warning Event)",
    )
    http_limits: http.ServerLimits = settings_of(default_factory=http.ServerLimits, prefix="http")
    loop_lag: LoopLagSettings = settings_of(default_factory=LoopLagSettings)
    token_watch: TokenWatchSettings = settings_of(default_factory=TokenWatchSettings)  # slurmrestd's callers'
    restd: DrainSettings = settings_of(default_factory=DrainSettings)  # --daemon slurmrestd (restd/drain.py)
    tls: ssl.SSLContext | None = None  # --tls-cert-file, --tls-key-file

    @property
    def conf_dir(self) -> Path:
        """The target as slurmctld names it (its absolute Includes, its own messages)."""
        return self.target_read_at or self.target


def configure(p: argparse.ArgumentParser) -> None:
    add_flags(p, Settings)
    http.configure_tls(p)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def from_args(args: argparse.Namespace) -> Settings:
    given = values(Settings, args)
    secret_sources = given["secret_sources"] = tuple(s.absolute() for s in given.get("secret_sources", ()))
    sources = given["sources"] = tuple(s.absolute() for s in given["sources"]) + secret_sources
    for s in sources:
        if not s.is_dir():
            raise ConfigError(f"--source: {s} is not a directory")
    target = given["target"] = given["target"].absolute()
    if target in sources:
        raise ConfigError("--target must not be one of the --source directories")
    # a Kubernetes emptyDir for the target may be mounted above it: config-sync makes the directory
    # itself, but a parent that is missing means a wrong path, not a fresh volume
    if target.exists() and not target.is_dir():
        raise ConfigError(f"--target: {target} is not a directory")
    if not target.exists() and not target.parent.is_dir():
        raise ConfigError(f"--target: neither {target} nor its parent {target.parent} is a directory")
    read_at = given.get("target_read_at")
    if read_at is not None and not read_at.is_absolute():  # a path in slurmctld's container, not ours
        raise ConfigError(f"--target-read-at: an absolute path is expected, got {str(read_at)!r}")
    state_dir = given.get("state_dir")
    state_dir = given["state_dir"] = state_dir.absolute() if state_dir else target.parent / ".config-sync"
    if state_dir == target or target in state_dir.parents:
        raise ConfigError("--state-dir must lie outside --target")
    if given.get("viewer_token") is None and not _loopback(given["http_address"][0]):
        raise ConfigError(
            f"--http {args.http}: /status and /history show the config: give --viewer-token-file, "
            "or serve on 127.0.0.1 only"
        )
    if given.get("operator_token") is not None and given.get("operator_token") == given.get("viewer_token"):
        raise ConfigError("--operator-token-file: must differ from --viewer-token-file (a viewer could plan)")
    if given.get("daemon") == daemons.SLURMDBD:
        # one file, stated once: slurmdbd reads slurmdbd.conf, whatever else is in the set
        if given.get("main_file", "slurmdbd.conf") != "slurmdbd.conf":
            raise ConfigError(
                "--main-file: slurmdbd reads slurmdbd.conf; leave it out with --daemon slurmdbd"
            )
        given["main_file"] = "slurmdbd.conf"
        given["dry_run"] = False  # the dry run is slurmctld's; slurmdbd's own reading is dbdcheck's
    if given.get("daemon") == daemons.SLURMRESTD:
        given["dry_run"] = False  # slurmrestd runs no job and keeps no state: nothing to dry-run
    main_file = str(given.get("main_file", "slurm.conf"))
    if "/" in main_file or main_file.startswith(".."):
        raise ConfigError(f"--main-file: a plain file name is expected, got {main_file!r}")
    plugin_dir = given.get("plugin_dir")
    if plugin_dir is not None:
        plugin_dir = given["plugin_dir"] = plugin_dir.absolute()
        if not plugin_dir.is_dir():
            raise ConfigError(f"--plugin-dir: {plugin_dir} is not a directory")
    if not given.get("dry_run_slurmctld", SLURMCTLD):
        raise ConfigError("--dry-run-slurmctld: a command is required")
    for peer in given.get("peers", ()):
        if not peer.startswith(("http://", "https://")):
            raise ConfigError(f"--peer: an http:// or https:// URL is expected, got {peer!r}")
    try:
        given["peers"] = ha_peers.others(tuple(given.get("peers", ())), given.get("pod_name"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if given.get("peers"):
        given["controller"] = given.get("controller") or socket.gethostname().split(".", 1)[0]
    if given.get("dry_run_state_dir") is not None:
        given["dry_run_state_dir"] = given["dry_run_state_dir"].absolute()
    return Settings(tls=http.tls_from(args), **given)
