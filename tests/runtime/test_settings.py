"""Each setting stated once: every flag a role lists in `--help` reads the same from argv and from
its `SIDECARS_*` variable, defaults are what they were, durations carry their unit in their names,
booleans are `true|false` with the old spellings warned about, and a bad value is exit 2 with one
line."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import re
import ssl
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from sidecars import check_secret, drainhook, probe
from sidecars.cli import self_argv
from sidecars.configsync import settings as configsync
from sidecars.configsync.guard.main import GuardSettings
from sidecars.configsync.guard.main import configure as guard_configure
from sidecars.controlplane import settings as controlplane
from sidecars.demo.main import DemoSettings
from sidecars.demo.main import configure as demo_configure
from sidecars.operator.status import settings as status
from sidecars.runtime.logs import LogSettings, asked
from sidecars.runtime.settings import (
    BOOL,
    GROUP,
    ConfigError,
    add_flags,
    declared,
    env_name,
    flags_of,
    seconds,
    setting,
    settings_from,
    values,
)
from sidecars.worker import settings as worker
from tests.helpers import refused_invocation
from tests.settings import TOKEN, VIEWER

pytestmark = pytest.mark.timeout(90)

POD = {"POD_NAME": "worker-7", "POD_NAMESPACE": "hpc"}


@dataclasses.dataclass(frozen=True)
class Role:
    name: str
    configure: Callable[[argparse.ArgumentParser], None]
    build: Callable[[argparse.Namespace], Any] | None  # None: the command converts its own flags
    base: list[str]  # what it must be given
    samples: dict[str, list[str]]  # each flag in its --help: a value that differs from the default


def _roles(d: Path) -> list[Role]:
    for sub in ("src", "etc", "sock", "state", "secret", "plug", "dry", "map", "other"):
        (d / sub).mkdir(exist_ok=True)
    (d / "tok").write_text(TOKEN)
    (d / "viewer").write_text(VIEWER)
    ca = "/etc/ssl/certs/ca-certificates.crt"
    limits = {
        "--http-header-seconds": ["4"],
        "--http-body-seconds": ["5"],
        "--http-max-connections": ["6"],
        "--http-max-connections-per-source": ["3"],
        "--http-first-request-seconds": ["2"],
        "--http-inflight-body-bytes": ["70000"],
        "--loop-lag-bound-seconds": ["7"],
    }
    return [
        Role(
            "config-sync",
            configsync.configure,
            configsync.from_args,
            ["--source", f"{d}/src", "--target", f"{d}/etc", "--http", "127.0.0.1:0"],
            {
                "--source": [f"{d}/other"],
                "--target": [f"{d}/other/etc"],
                "--target-read-at": [f"{d}/seen"],
                "--http": ["127.0.0.1:9"],
                "--state-dir": [f"{d}/state"],
                "--secret-source": [f"{d}/secret"],
                "--viewer-token-file": [f"{d}/viewer"],
                "--operator-token-file": [f"{d}/tok"],
                "--peer": ["http://ctld-1.slurmctld.slurm.svc.cluster.local.:8080"],
                "--peer-ca-file": [ca],
                "--controller": ["ctld-0"],
                "--pod-name": ["slurmctld-0"],
                "--ha-poll-seconds": ["2"],
                "--ha-catch-up-seconds": ["40"],
                "--debounce-seconds": ["0.5"],
                "--debounce-max-seconds": ["7"],
                "--rehash-seconds": ["11"],
                "--registration-seconds": ["12"],
                "--settle-seconds": ["0"],
                "--max-file-bytes": ["2048"],
                "--restart-policy": ["restart"],
                "--restart-timeout-seconds": ["9"],
                "--history-limit": ["3"],
                "--main-file": ["other.conf"],
                "--daemon": ["slurmdbd"],
                "--slurmdbd-command": ["/x/slurmdbd"],
                "--plugin-dir": [f"{d}/plug"],
                "--dry-run": ["false"],
                "--dry-run-slurmctld": ["/x/slurmctld -D"],
                "--dry-run-isolation": ["ports"],
                "--dry-run-state-dir": [f"{d}/dry"],
                "--dry-run-stay-seconds": ["2"],
                "--dry-run-state-sync-seconds": ["4"],
                "--dry-run-timeout-seconds": ["3"],
                "--allow-job-loss": ["true"],
                "--watch-token": [f"{d}/tok"],
                "--token-warn-seconds": ["600"],
                "--token-check-seconds": ["5"],
                "--restd-port": ["6821"],
                "--restd-unready-seconds": ["3"],
                "--restd-drain-seconds": ["30"],
                "--restd-uid": ["65534"],
                "--restd-turn-lease": ["slurmrestd-turn"],
                "--restd-turn-lease-seconds": ["20"],
                "--restd-log-file": [f"{d}/restd/slurmrestd.log"],
                "--tls-cert-file": [],  # with its key, below
                "--tls-key-file": [],
                **limits,
            },
        ),
        Role(
            "worker",
            worker.configure,
            lambda a: worker.from_args(a, env=POD),
            ["--node-name", "n1", "--http", "127.0.0.1:0", "--socket", f"{d}/sock/a.sock"],
            {
                "--node-name": ["n2"],
                "--http": ["127.0.0.1:9"],
                "--socket": [f"{d}/state/b.sock"],
                "--state-dir": [f"{d}/state"],
                "--control-plane": ["http://cp:1/", "--token-file", f"{d}/tok"],
                "--token-file": [],  # with --control-plane
                "--viewer-token-file": [f"{d}/viewer"],
                "--ca-file": [ca],
                "--job-mapping-dir": [f"{d}/map"],
                "--registration-timeout-seconds": ["7"],
                "--slurmd-restart-command": ["supervisorctl restart 'slurmd main'"],
                "--heal-attempts": ["0"],
                "--heal-backoff-seconds": ["2"],
                "--poll-seconds": ["3"],
                "--drain-poll-seconds": ["0.5"],
                "--fallback-max-seconds": ["20"],
                "--drain-timeout-policy": ["leave"],
                "--drain-timeout-seconds": ["60"],
                "--slurmd-missing-grace-seconds": ["0"],
                "--stale-seconds": ["30"],
                "--slurm-timeout-seconds": ["9"],
                "--dynamic-node": ["true"],
                "--node-name-from": [],  # with --kube-node-name, below
                "--kube-node-name": [],
                "--node-name-annotation": ["x.io/n"],
                "--worker-selector": ["a=b"],
                "--imex-channel": ["/dev/x"],
                "--gpu-check": ["on"],
                "--gpu-check-interval-seconds": ["5"],
                "--gpu-check-timeout-seconds": ["3"],
                "--gpu-check-drain": ["false"],
                "--topology-labels": [],  # needs kube-node naming: below
                "--topology-type": [],
                "--topology-name": [],
                **limits,
            },
        ),
        Role(
            "control-plane",
            controlplane.configure,
            controlplane.from_args,
            ["--http", "127.0.0.1:0", "--token-file", f"{d}/tok", "--viewer-token-file", f"{d}/viewer"],
            {
                "--http": ["127.0.0.1:9"],
                "--token-file": [],  # a credential of its own: checked below
                "--viewer-token-file": [],
                "--agent-audience": ["aud"],
                "--config-sync": ["http://cs:1/"],
                "--interval-seconds": ["2"],
                "--fast-interval-seconds": ["0.5"],
                "--reconfigure-poll-seconds": ["0"],
                "--job-read": ["full"],
                "--batch-window-seconds": ["0"],
                "--max-wait-seconds": ["30"],
                "--namespace": ["ns"],
                "--worker-selector": ["a=b"],
                "--node-label": ["lab"],
                "--node-name-from": ["kube-node"],
                "--node-name-annotation": ["x.io/n"],
                "--kubeconfig": ["/k"],
                "--kubernetes": ["off"],
                "--lease-name": ["ln"],
                "--leader-label": ["true"],
                "--lease-seconds": ["30"],
                "--renew-seconds": ["9"],
                "--identity": ["me"],
                "--pod-name": ["pn"],
                "--deletion-cost-qps": ["2"],
                "--slinky-mode": ["false"],
                "--recycle-grace-seconds": ["0"],
                "--recycle-window-seconds": ["9"],
                "--recycle-fraction": ["0.5"],
                "--recycle-backoff-seconds": ["8"],
                "--recycle-backoff-max-seconds": ["99"],
                "--unowned-drain-policy": ["true"],
                "--unowned-settle-seconds": ["7"],
                "--record-cleanup": ["false"],
                "--record-grace-seconds": ["0"],
                "--record-deletes-per-pass": ["7"],
                "--cordon-sync": ["false"],
                "--cordon-taints": ["a/b,c"],
                "--health-conditions": ["KernelDeadlock,GPUHealthy=False"],
                "--health-taints": ["a/b=c"],
                "--health-settle-seconds": ["0"],
                "--health-max-fraction": ["0.5"],
                "--pod-conditions": ["false"],
                "--condition-qps": ["3"],
                "--condition-settle-seconds": ["0"],
                "--busy-label": ["false"],
                "--busy-label-qps": ["4"],
                "--busy-release-seconds": ["0"],
                "--topology-labels": ["a/zone,b/rack"],
                "--topology-type": ["block", "--topology-labels", "a/zone"],
                "--topology-name": ["t1", "--topology-labels", "a/zone"],
                "--topology-configmap": ["topo"],
                "--topology-settle-seconds": ["0"],
                "--upgrade-slurmdbd-workload": ["statefulset/slurmdbd"],
                "--upgrade-slurmdbd-container": ["dbd"],
                "--upgrade-slurmctld-statefulset": ["ctld"],
                "--upgrade-slurmctld-container": ["ctld"],
                "--upgrade-state-image": ["registry.example/sidecars:1"],
                "--upgrade-backup-job-configmap": ["slurmdbd-backup"],
                "--upgrade-without-database-backup": ["true"],
                "--upgrade-rollout-timeout-seconds": ["30"],
                "--upgrade-job-timeout-seconds": ["30"],
                "--upgrade-worker-budget": ["25%"],
                "--gpu-domain-features": ["false"],
                "--compute-domains": ["true"],
                "--tls-cert-file": [],
                "--tls-key-file": [],
                **limits,
            },
        ),
        Role(
            "status",
            status.configure,
            status.StatusSettings.from_args,
            [],
            {
                "--control-plane": ["http://cp:1/", "--token-file", f"{d}/tok"],
                "--token-file": [],  # with --control-plane
                "--config-sync": ["http://cs:2"],
                "--timeout-seconds": ["7"],
                "--ca-file": [ca],
            },
        ),
        Role(
            "drain-hook",
            drainhook.configure,
            None,
            ["--socket", f"{d}/sock/a.sock"],
            {"--socket": [f"{d}/b.sock"], "--timeout-seconds": ["60"], "--reason": ["upgrade"]},
        ),
        Role(
            "probe",
            probe.configure,
            None,
            ["livez", "--url", "http://127.0.0.1:1"],
            {
                "--url": ["http://127.0.0.1:2"],
                "--timeout-seconds": ["9"],
                "--controller": ["ctld-b"],
                "--ca-file": [ca],
                "--slurm-token-file": [f"{d}/slurm.jwt"],
                "--jwt-key-file": [f"{d}/jwt_hs256.key"],
                "--jwt-user": ["root"],
                "--path": ["/metrics/jobs"],
                "--token-file": [f"{d}/tok"],
            },
        ),
        Role(
            "check-secret",
            check_secret.configure,
            None,
            ["--file", f"{d}/tok"],
            {"--file": [f"{d}/viewer"], "--min-bytes": ["64"]},
        ),
        Role(
            "config-guard",
            guard_configure,
            lambda a: settings_from(GuardSettings, a),
            ["--target", f"{d}/etc"],
            {"--target": [f"{d}/other/etc"]},
        ),
        Role(
            "demo",
            demo_configure,
            lambda a: settings_from(DemoSettings, a),
            [],
            {
                "--release": ["chroot"],
                "--nodes": ["4"],
                "--shape": ["slinky"],
                "--tour": ["true"],
                "--accounting": ["true"],
                "--upgrade-to": ["sid"],
            },
        ),
        Role(  # the command line's own, before the subcommand's name
            "log",
            lambda p: add_flags(p, LogSettings),
            asked,
            [],
            {"--log-level": ["debug"], "--log-format": ["json"]},
        ),
    ]


def _self_signed(d: Path) -> list[str]:
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=127.0.0.1")
    argv = ["openssl", "req", "-x509", *ec, "-keyout", "tls.key", "-out", "tls.crt", "-days", "1"]
    subprocess.run(argv, check=True, capture_output=True, timeout=30, cwd=d)
    return ["--tls-cert-file", str(d / "tls.crt"), "--tls-key-file", str(d / "tls.key")]


def _help_flags(role: Role) -> list[str]:
    p = argparse.ArgumentParser()
    role.configure(p)
    return sorted(set(re.findall(r"(--[a-z][a-z0-9-]+)", p.format_help())) - {"--help"} - _in_help_text(p))


def _in_help_text(p: argparse.ArgumentParser) -> set[str]:
    """Flags only named inside another flag's help (`--node-name-from=kube-node`), not options."""
    options = {o for a in p._actions for o in a.option_strings}
    return set(re.findall(r"(--[a-z][a-z0-9-]+)", p.format_help())) - options


def _parse(role: Role, argv: list[str]) -> Any:
    p = argparse.ArgumentParser()
    role.configure(p)
    args = p.parse_args(argv)
    if role.build is None:
        return {k: v for k, v in vars(args).items() if not k.startswith("_")}
    return _shown(role.build(args))


def _shown(settings: Any) -> dict[str, Any]:
    """The settings' fields, a TLS context by its presence (two loads of one file never compare equal)."""
    out = {}
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        out[f.name] = "<tls>" if isinstance(value, ssl.SSLContext) else value
    return out


def _at(shown: dict[str, Any], path: str) -> Any:
    """A field of shown settings by its dotted path (`recycle.grace_seconds`: a group's field)."""
    head, *rest = path.split(".")
    value = shown[head]
    for name in rest:
        value = getattr(value, name)
    return value


def _fields(cls: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field[Any]]]:
    """Every field of `cls` and of its nested groups, by dotted path."""
    for f in dataclasses.fields(cls):
        if GROUP in f.metadata:
            yield from _fields(f.default_factory, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name, f


def _pairs(argv: list[str]) -> Iterator[tuple[str, str]]:
    for i in range(0, len(argv), 2):
        yield argv[i], argv[i + 1]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import os

    for var in [v for v in os.environ if v.startswith("SIDECARS_")]:
        monkeypatch.delenv(var)
    for var in ("POD_NAME", "POD_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def _multiple(role: Role) -> set[str]:
    p = argparse.ArgumentParser()
    role.configure(p)
    return {
        a.option_strings[0] for a in p._actions if getattr(getattr(a, "sidecars_flag", None), "multiple", 0)
    }


def _from_env(role: Role, argv: list[str], env: pytest.MonkeyPatch) -> Any:
    """`argv` given as variables (a repeated flag comma-separated), and only positionals as argv."""
    positional = list(itertools.takewhile(lambda a: not a.startswith("--"), argv))
    texts: dict[str, str] = {}
    for flag, value in _pairs(argv[len(positional) :]):
        joined = flag in _multiple(role) and flag in texts
        texts[flag] = f"{texts[flag]},{value}" if joined else value
    with env.context() as e:
        for flag, value in texts.items():
            e.setenv(env_name(flag), value)
        return _parse(role, positional)


ROLE_NAMES = [
    "config-sync", "worker", "control-plane", "status", "drain-hook", "probe", "check-secret",
    "config-guard", "demo", "log",
]  # fmt: skip


@pytest.mark.parametrize("which", ROLE_NAMES)
def test_every_flag_in_help_reads_the_same_from_argv_and_from_its_variable(
    which: str, sockdir: Path, clean_env: pytest.MonkeyPatch
) -> None:
    role = next(r for r in _roles(sockdir) if r.name == which)
    assert sorted(role.samples) == _help_flags(role), "each flag in --help needs a sample here"
    defaults = _parse(role, role.base)
    assert _from_env(role, role.base, clean_env) == defaults
    tls = _self_signed(sockdir) if which in ("config-sync", "control-plane") else []
    combos = {
        "config-sync": [tls],
        "worker": [
            ["--node-name-from", "kube-node", "--kube-node-name", "k1", "--topology-labels", "a/zone"],
            [
                "--node-name-from",
                "kube-node",
                "--kube-node-name",
                "k1",
                "--topology-labels",
                "a/zone",
                "--topology-type",
                "block",
                "--topology-name",
                "t2",
            ],
        ],
        "control-plane": [tls],
    }.get(which, [])
    for given in [[name, *sample] for name, sample in role.samples.items() if sample] + combos:
        argv = [*role.base, *given]
        if which == "worker" and given[:2] == ["--node-name-from", "kube-node"]:
            argv = argv[2:]  # no --node-name with kube-node naming
        from_argv = _parse(role, argv)
        assert from_argv != defaults, f"{which} {given} changed nothing"
        assert _from_env(role, argv, clean_env) == from_argv, f"{which} {given}: the variable differs"


# what each role's settings were by default before their flags were declared once (captured from
# that code), under the fields' new names: the declarations must not have moved any
BEFORE: dict[str, dict[str, Any]] = {
    "config-sync": {
        "allow_job_loss": False, "debounce_max_seconds": 5.0, "debounce_seconds": 0.1, "dry_run": True,
        "dry_run_isolation": "auto", "dry_run_slurmctld": ("slurmctld",), "dry_run_state_dir": None,
        "dry_run_stay_seconds": 0.0, "dry_run_timeout_seconds": 15.0, "history_limit": 20,
        "http_address": ("127.0.0.1", 0), "main_file": "slurm.conf", "max_file_bytes": 1048576,
        "parse_timeout_seconds": 10.0, "plugin_dir": None, "rehash_seconds": 30.0, "restart_policy": "hold",
        "restart_timeout_seconds": 60.0, "retry_max_seconds": 10.0, "secret_sources": (),
        "settle_seconds": 5.0, "viewer_token": None, "tls": None,
    },
    "control-plane": {
        "agent_audience": "slurm-sidecars", "batch_window_seconds": 0.1, "reads.brief_jobs": True,
        "busy.label": True, "busy.label_qps": 10.0, "busy.release_seconds": 30.0,
        "gpu.compute_domains": False, "conditions.qps": 5.0,
        "conditions.settle_seconds": 10.0, "config_sync": None, "cordons.sync": True, "cordons.taints": (),
        "deletion_cost_qps": 5.0, "reads.fast_interval_seconds": 0.25, "gpu.domain_features": True,
        "http_address": ("127.0.0.1", 0), "reads.interval_seconds": 4.0, "kubeconfig": None,
        "kubernetes": True, "lease.name": "slurm-sidecars-control-plane", "lease.duration_seconds": 15.0,
        "max_wait_seconds": 60.0,
        "namespace": "slurm", "node_label": "", "node_name_annotation": "slurm-sidecars.io/slurm-node-name",
        "node_name_from": "pod", "conditions.enabled": True, "recycle.backoff_max_seconds": 3600.0,
        "recycle.backoff_seconds": 60.0, "recycle.fraction": 0.1, "recycle.grace_seconds": 300.0,
        "recycle.window_seconds": 600.0, "lease.renew_seconds": 7.0, "topology.spec": None,
        "topology.configmap": "", "topology.settle_seconds": 10.0,
        "worker_selector": "app.kubernetes.io/component=worker",
        "token": TOKEN, "viewer_token": VIEWER, "pod_name": "", "tls": None,
    },
    "status": {
        "config_sync": None, "control_plane": None, "timeout_seconds": 5.0, "token": None, "tls": None,
    },
    "worker": {
        "control_plane": None, "drain_timeout_seconds": 3600.0, "drain_poll_seconds": 0.25,
        "drain_timeout_policy": "requeue", "dynamic": False, "fallback_max_seconds": 15.0, "heal_attempts": 3,
        "heal_backoff_seconds": 10.0, "http_address": ("127.0.0.1", 0),
        "imex_channel": Path("/dev/nvidia-caps-imex-channels/channel0"), "job_mapping_dir": None,
        "kube_node": "", "node_name": "n1", "node_name_annotation": "slurm-sidecars.io/slurm-node-name",
        "node_name_from": "pod", "pod_namespace": "hpc", "pod_name": "worker-7", "poll_seconds": 15.0,
        "registration_timeout_seconds": 120.0, "slurm_timeout_seconds": 15.0,
        "slurmd_missing_grace_seconds": 5.0, "slurmd_restart_command": (), "stale_seconds": 90.0,
        "token_file": None, "topology": None, "worker_selector": "app.kubernetes.io/component=worker",
        "control_plane_tls": None,
    },
}  # fmt: skip


@pytest.mark.parametrize("which", list(BEFORE))
def test_defaults_are_what_they_were(which: str, sockdir: Path, clean_env: pytest.MonkeyPatch) -> None:
    role = next(r for r in _roles(sockdir) if r.name == which)
    got = _parse(role, role.base)
    assert {k: _at(got, k) for k in BEFORE[which]} == BEFORE[which]
    if "http_limits" in got:
        limits = got["http_limits"]
        assert (limits.header_seconds, limits.body_seconds, limits.max_connections) == (10.0, 10.0, 4096)


ALL_SETTINGS = [
    configsync.Settings, controlplane.ControlPlaneSettings, status.StatusSettings, worker.WorkerSettings,
]  # fmt: skip
DURATION = re.compile(
    r"timeout|interval|grace|backoff|poll|window|delay|period|settle|stay|seconds|lease|renew"
)


def test_durations_carry_their_unit_in_field_and_flag_names() -> None:
    for cls in ALL_SETTINGS:
        by_dest = {f.dest: f for f in flags_of(cls)}
        for path, field in _fields(cls):
            if field.type in ("float", float) and DURATION.search(field.name):
                assert field.name.endswith("_seconds"), f"{cls.__name__}.{path} drops its unit"
        for f in by_dest.values():
            if f.conv.unit == "s":
                assert f.name.endswith("-seconds"), f"{f.name} is a duration: its name must say seconds"


WORKER = ["--node-name", "n1", "--http", "127.0.0.1:0", "--socket", "{d}/a.sock"]
CONFIG_SYNC = ["--source", "{d}", "--target", "{d}/etc", "--http", "127.0.0.1:0"]
PLANE = ["--http", "127.0.0.1:0", "--token-file", "{d}/tok", "--viewer-token-file", "{d}/viewer"]
BOOL_FLAGS = sorted(
    {(cls, f.name) for cls in ALL_SETTINGS for f in flags_of(cls) if f.conv is BOOL},
    key=lambda x: x[1],
)
OLD = {"on": True, "off": False, "yes": True, "no": False, "TRUE": True, "False": False}


@pytest.mark.parametrize(("role", "flag"), [(cls.__name__, f) for cls, f in BOOL_FLAGS])
def test_every_boolean_is_true_or_false_and_the_old_spellings_still_work_with_a_warning(
    role: str, flag: str, sockdir: Path, clean_env: pytest.MonkeyPatch
) -> None:
    r = next(x for x in _roles(sockdir) if _settings_of(x) == role)
    field = next(f.path for f in flags_of(_class(role)) if f.name == flag)
    for spelling, want in {"true": True, "false": False}.items():
        with capture_logs() as logs:
            assert _at(_parse(r, [*r.base, flag, spelling]), field) is want
        assert not [e for e in logs if e["event"] == "setting_old_spelling"]
    for spelling, want in OLD.items():
        with capture_logs() as logs:
            assert _at(_parse(r, [*r.base, flag, spelling]), field) is want
        warned = [e for e in logs if e["event"] == "setting_old_spelling"]
        assert warned == [
            {"event": "setting_old_spelling", "log_level": "warning", "flag": flag, "given": spelling,
             "write": "true" if want else "false"}
        ]  # fmt: skip
        with capture_logs() as logs, clean_env.context() as env:  # the variable's old spelling too
            env.setenv(env_name(flag), spelling)
            assert _at(_parse(r, r.base), field) is want
        assert [e["write"] for e in logs if e["event"] == "setting_old_spelling"] == [str(want).lower()]
    with pytest.raises(ConfigError, match=f"^{flag}: true or false, got 'maybe'$"):
        _parse(r, [*r.base, flag, "maybe"])


def _class(name: str) -> type:
    return next(c for c in ALL_SETTINGS if c.__name__ == name)


def _settings_of(role: Role) -> str:
    return {
        "config-sync": "Settings", "worker": "WorkerSettings", "control-plane": "ControlPlaneSettings",
        "status": "StatusSettings",
    }.get(role.name, "")  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["worker", "--node-name", "n1", "--http", "127.0.0.1:0"], "worker: --socket is required"),
        (
            ["worker", *WORKER, "--dynamic-node", "maybe"],
            "worker: --dynamic-node: true or false, got 'maybe'",
        ),
        (["worker", *WORKER, "--poll-seconds", "0"], "worker: --poll-seconds: must be > 0, got '0'"),
        (["config-sync", "--http", "127.0.0.1:0"], "config-sync: --source is required"),
        (
            ["config-sync", *CONFIG_SYNC, "--restart-policy", "sometimes"],
            "--restart-policy: one of hold, restart",
        ),
        (["config-sync", *CONFIG_SYNC, "--dry-run", "perhaps"], "--dry-run: true or false, got 'perhaps'"),
        (["control-plane", *PLANE, "--busy-label", "sure"], "--busy-label: true or false, got 'sure'"),
        (["control-plane", *PLANE, "--interval-seconds", "nan"], "--interval-seconds: expected a number"),
        (["control-plane", *PLANE, "--recycle-fraction", "2"], "--recycle-fraction: must be <= 1, got '2'"),
        (["status", "--timeout-seconds", "-1"], "--timeout-seconds: must be > 0"),
    ],
)
async def test_a_bad_value_or_a_missing_flag_is_exit_2_with_one_line(
    argv: list[str], says: str, tmp_path: Path
) -> None:
    (tmp_path / "tok").write_text(TOKEN)
    (tmp_path / "viewer").write_text(VIEWER)
    line = await refused_invocation(*self_argv(*[a.replace("{d}", str(tmp_path)) for a in argv]))
    assert says in line, line


@declared()
class _Renamed:
    grace_seconds: float = setting(default=1.0, conv=seconds(), aliases=("--grace",), help="a renamed flag")
    on: bool = setting(default=False, conv=BOOL, help="a boolean")


def test_an_old_flag_name_still_works_and_warns_naming_the_new(clean_env: pytest.MonkeyPatch) -> None:
    def parse(*argv: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        p = argparse.ArgumentParser()
        add_flags(p, _Renamed)
        with capture_logs() as logs:
            got = values(_Renamed, p.parse_args(list(argv)))
        return got, [e for e in logs if e["event"] == "setting_old_spelling"]

    assert parse("--grace-seconds", "3") == ({"grace_seconds": 3.0}, [])
    got, warned = parse("--grace", "3")
    assert got == {"grace_seconds": 3.0}
    assert [(w["flag"], w["old_name"], w["write"]) for w in warned] == [
        ("--grace-seconds", "--grace", "--grace-seconds")
    ]
    with clean_env.context() as env:
        env.setenv("SIDECARS_GRACE", "4")
        got, warned = parse()
    assert got == {"grace_seconds": 4.0}
    assert [(w["old_name"], w["write"]) for w in warned] == [("SIDECARS_GRACE", "SIDECARS_GRACE_SECONDS")]
    with clean_env.context() as env:  # the new name's variable wins, and nothing is said
        env.setenv("SIDECARS_GRACE", "4")
        env.setenv("SIDECARS_GRACE_SECONDS", "5")
        assert parse() == ({"grace_seconds": 5.0}, [])
    p = argparse.ArgumentParser()
    add_flags(p, _Renamed)
    text = " ".join(p.format_help().split())
    assert "--grace-seconds SECONDS, --grace SECONDS" in text and "default: 1 s" in text
    assert "[env SIDECARS_GRACE_SECONDS]" in text


def test_help_gives_each_default_with_its_unit_and_its_variable(sockdir: Path) -> None:
    p = argparse.ArgumentParser()
    worker.configure(p)
    text = " ".join(p.format_help().split())
    want = "time-out of one Slurm command (default: 15 s) [env SIDECARS_SLURM_TIMEOUT_SECONDS]"
    assert f"--slurm-timeout-seconds SECONDS {want}" in text
    assert "--dynamic-node true|false" in text and "(default: false)" in text


def test_an_empty_value_unsets_an_optional_setting_and_is_refused_for_a_required_one(
    sockdir: Path, clean_env: pytest.MonkeyPatch
) -> None:
    plane = next(r for r in _roles(sockdir) if r.name == "control-plane")
    empty = ["--kubeconfig", "", "--config-sync", "", "--agent-audience", "", "--cordon-taints", ""]
    got = _parse(plane, [*plane.base, *empty])
    assert (got["kubeconfig"], got["config_sync"], got["agent_audience"], got["cordons"].taints) == (
        None, None, "", (),
    )  # fmt: skip
    sync = next(r for r in _roles(sockdir) if r.name == "config-sync")
    with clean_env.context() as env:
        env.setenv("SIDECARS_PLUGIN_DIR", "")
        env.setenv("SIDECARS_STATE_DIR", "")
        got = _parse(sync, sync.base)
    assert got["plugin_dir"] is None and got["state_dir"] == sockdir / ".config-sync"
    agent = next(r for r in _roles(sockdir) if r.name == "worker")
    with pytest.raises(ConfigError, match=r"^--socket: a path is required$"):
        _parse(agent, [*agent.base, "--socket", ""])
