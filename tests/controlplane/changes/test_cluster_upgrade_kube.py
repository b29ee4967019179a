"""A whole-cluster upgrade 24.11 -> 26.05 through Kubernetes, on real daemons with MariaDB: the
stage machine acts on slurmdbd's Deployment and slurmctld's StatefulSet in the fake API server
(through kubernetes-asyncio), and a small kubelet (tests/fakekube/devkubelet.py) maps them onto the
dev cluster's daemons: a scale to 0 stops slurmctld, an image tag starts that release, a Job runs
its command for real on the cluster's files.

A whole upgrade completes with every job there, its backup and state copy on disk, and every write
the control plane's identity made allowed by the Role in manifests/rbac; a slurmctld image that
never gets Ready is rolled back through the restore Job; a backup Job that fails halts before
slurmdbd is touched; what is missing or unsafe in the settings or the template is refused in one
line, before anything changes. The workers' stage is the dev cluster's drain-first roll here (the
Kubernetes roll is upgrade.py's, tested on its own)."""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecars.controlplane.changes import KubeClusterRoles, KubeRoleNames
from sidecars.controlplane.changes.cluster_roles.kube_jobs import TemplateError, backup_job
from sidecars.controlplane.changes.cluster_upgrade.stages import ClusterUpgrade
from sidecars.controlplane.settings import ClusterUpgradeSettings, configure, from_args
from sidecars.devcluster import ClusterSpec, Release
from sidecars.devcluster.swap_roles import DevClusterRoles
from sidecars.kube import KubeClient
from sidecars.runtime.settings import ConfigError
from sidecars.slurm import Version
from tests.controlplane.changes.test_cluster_upgrade import Sabotaged
from tests.controlplane.changes.upgrade_records import finished_record
from tests.controlplane.conftest import control_plane
from tests.fakekube import FakeKube
from tests.fakekube.devkubelet import NAMESPACE, DevKubelet, image
from tests.fakekube.server import Request, configuration
from tests.helpers import eventually

pytestmark = [pytest.mark.releases("slurm24"), pytest.mark.timeout(300)]

TOKEN = "control-plane-sa-token"  # the control plane's ServiceAccount: every write it makes is audited
# the control plane's Roles where it can run the upgrade: the base's, and the upgrade's own
RBAC = {
    "slurm-sidecars": Path(__file__).parents[3] / "manifests" / "rbac" / "rbac.yaml",
    "slurm-sidecars-upgrade": Path(__file__).parents[3] / "manifests" / "overlays" / "upgrades" / "rbac.yaml",
}
BACKUP_CM = "slurmdbd-backup"
UPGRADE = {  # what a whole-cluster upgrade moves (the upgrade group of the control plane's settings)
    "slurmdbd_workload": ("Deployment", "slurmdbd"),
    "slurmctld_statefulset": "slurmctld",
    "state_image": "registry.example/slurm-sidecars:1",
    "backup_job_configmap": BACKUP_CM,
}
BACKUP_CLAIM = "db-backups"
LOCATION = "backups/slurm_acct_db-$(SLURM_SIDECARS_UPGRADE_STAMP).sql"  # the template's word for its dump


def backup_template(socket_dir: Path, socket_name: str) -> str:
    """An operator's backup Job: mariadb-dump over the database's socket (a path here: the dev
    kubelet runs the command on this host), into the claim db-backups (DevKubelet.claims); the
    password (none here: root by socket) would come from a Secret."""
    dump = (
        f"mariadb-dump --no-defaults --socket={socket_dir}/{socket_name} -u root --single-transaction "
        "--databases slurm_acct_db > /mnt/backups/slurm_acct_db-$SLURM_SIDECARS_UPGRADE_STAMP.sql"
    )
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"annotations": {"slurm-sidecars.io/backup-location": LOCATION}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "dump",
                            "image": "mariadb:11",
                            "command": ["sh", "-c", dump],
                            "env": [
                                {
                                    "name": "MYSQL_PWD",
                                    "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}},
                                }
                            ],
                            "volumeMounts": [{"name": "backups", "mountPath": "/mnt/backups"}],
                        }
                    ],
                    "volumes": [{"name": "backups", "persistentVolumeClaim": {"claimName": BACKUP_CLAIM}}],
                }
            },
        },
    }
    return yaml.safe_dump(job)


@dataclass
class Kube:
    cluster: Sabotaged
    fake: FakeKube
    kubelet: DevKubelet
    roles: KubeClusterRoles
    target: Version
    backups: Path
    events: list[tuple[str, str, str]]
    go: Path
    url: str  # the fake API server's

    async def emit(self, stage: str, state: str, message: str) -> None:
        self.events.append((stage, state, message))
        if (stage, state) == ("workers", "running"):
            self.go.touch()  # the roll waits for the job on its worker: it ends now, as jobs do

    def upgrade(self, images: dict[str, str] | None = None) -> ClusterUpgrade:
        newer = self.kubelet.releases[f"{self.target.major}.{self.target.minor:02d}"]
        given = images or {"slurmdbd": image("slurmdbd", newer), "slurmctld": image("slurmctld", newer)}
        return ClusterUpgrade(
            self.roles, self.target, {**given, "slurmd": "sid"}, emit=self.emit, verify_timeout_seconds=30
        )

    def put_template(self, text: str) -> None:
        self.fake.config_maps[(NAMESPACE, BACKUP_CM)] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": BACKUP_CM, "namespace": NAMESPACE, "resourceVersion": "1"},
            "data": {"job.yaml": text},
        }


def _tag(release: Release) -> str:
    major, minor = release.version.split(".")[:2]
    return f"{major}.{minor}"


@pytest.fixture
async def kube(release: Release, newer: Release, request: pytest.FixtureRequest) -> AsyncIterator[Kube]:
    sabotage: dict[str, list[str]] = getattr(request, "param", {})
    spec = ClusterSpec(nodes=2, accounting=True, foreground_ctld=True)
    fake = FakeKube()
    fake.tokens.add(TOKEN)
    async with Sabotaged(release, spec, sabotage) as c, fake.serving() as url:
        kubelet = DevKubelet(fake, c, {_tag(release): release, _tag(newer): newer})
        kubelet.create_workloads(c.dir / "state")
        assert c.database is not None
        backups = c.dir / "backups"
        backups.mkdir()
        kubelet.claims[BACKUP_CLAIM] = str(backups)
        bridge = asyncio.create_task(kubelet.run(), name="devkubelet")
        try:
            async with KubeClient(configuration(url, TOKEN)) as client:
                dev = DevClusterRoles(c, {"chroot": release, "sid": newer}, worker_timeout_seconds=30)
                names = KubeRoleNames(
                    namespace=NAMESPACE,
                    upgrade=ClusterUpgradeSettings(
                        slurmdbd_workload=("Deployment", "slurmdbd"),
                        slurmctld_statefulset="slurmctld",
                        state_image="registry.example/slurm-sidecars:1",
                        backup_job_configmap=BACKUP_CM,
                        rollout_timeout_seconds=120,  # a loaded CI machine; no test here waits it out
                        job_timeout_seconds=60,
                    ),
                    own_pod="control-plane-5f7d9-abcde",
                    poll_interval_seconds=0.2,
                )
                roles = KubeClusterRoles(names, client, lambda: c.client(timeout=10.0), dev.roll_workers)
                k = Kube(
                    c, fake, kubelet, roles, Version.parse(newer.version), backups, [], c.out_dir / "go", url
                )
                k.put_template(backup_template(c.database.socket.parent, c.database.socket.name))
                yield k
        finally:
            bridge.cancel()
            await asyncio.gather(bridge, return_exceptions=True)
        assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("devkubelet-")]


async def _submit(k: Kube) -> tuple[int, int, dict[int, str]]:
    c = k.cluster
    spanning = await c.sbatch(wrap=f"while [ ! -e {k.go} ]; do sleep 0.2; done")
    await c.wait_job(spanning, "RUNNING", timeout=60)
    held = await c.sbatch("--hold", wrap="true")
    return spanning, held, await k.roles.jobs()


def _state_jobs(k: Kube) -> list[tuple[str, int]]:
    """The `slurm-sidecars state ACTION` Jobs the kubelet ran: (ACTION, exit code)."""
    return [(argv[4], code) for _, argv, code in k.kubelet.ran if argv[1:4] == ["-m", "sidecars", "state"]]


def _states(up: ClusterUpgrade) -> dict[str, str]:
    return {s.name: s.state for s in up.status.stages}


# ---------------------------------------------------------------------------------- the RBAC audit
def _rules() -> list[dict[str, Any]]:
    rules = []
    for name, path in RBAC.items():
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        rules += next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == name)["rules"]
    return rules


def _group_and_name(r: Request) -> tuple[str, str]:
    parts = [p for p in r.path.split("/") if p]
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[:1] == ["namespaces"]:
        rest = rest[2:]
    return group, rest[1] if len(rest) > 1 else ""


def forbidden(requests: list[Request], rules: list[dict[str, Any]]) -> list[str]:
    """Each request no rule of the Role allows: (verb, group, resource, name) as RBAC judges them
    (a create has no name to match resourceNames against)."""
    refused = []
    for r in requests:
        group, name = _group_and_name(r)
        named = "" if r.verb == "create" else name
        if not any(
            group in rule.get("apiGroups", [])
            and r.resource in rule.get("resources", [])
            and r.verb in rule.get("verbs", [])
            and (not rule.get("resourceNames") or named in rule["resourceNames"])
            for rule in rules
        ):
            refused.append(f"{r.verb} {group}/{r.resource} {name}".strip())
    return refused


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--upgrade-slurmdbd-workload", "daemonset/slurmdbd"], "not deployment/NAME or statefulset/NAME"),
        (["--upgrade-slurmctld-statefulset", "Slurm_Ctld"], "not a Kubernetes name"),
        (["--upgrade-worker-budget", "0"], "a number of workers or a percentage"),
        (
            ["--upgrade-backup-job-configmap", "b", "--upgrade-without-database-backup", "true"],
            "give one or the other",
        ),
    ],
)
def test_bad_upgrade_settings_are_refused_at_start(tmp_path: Path, argv: list[str], words: str) -> None:
    for name in ("tok", "viewer"):
        (tmp_path / name).write_text(secrets.token_hex(32))
    p = argparse.ArgumentParser()
    configure(p)
    tokens = ["--token-file", str(tmp_path / "tok"), "--viewer-token-file", str(tmp_path / "viewer")]
    args = p.parse_args(["--http", "127.0.0.1:0", *tokens, *argv])
    with pytest.raises(ConfigError, match=words):
        from_args(args)


@pytest.mark.parametrize(
    ("script", "refused"),
    [
        ("mariadb-dump -h db -P3306 -u backup --databases slurm_acct_db", False),  # -P: the port
        ("mariadb-dump -h db -u backup -phunter2 --databases slurm_acct_db", True),
        ("mysqldump --PASSWORD=hunter2 slurm_acct_db", True),
        ("mysqldump --password slurm_acct_db", False),  # asks, or reads its option file: nothing written
    ],
)
def test_a_password_on_the_backup_command_line_is_refused(script: str, refused: bool) -> None:
    job = yaml.safe_load(backup_template(Path("/x"), "s"))
    job["spec"]["template"]["spec"]["containers"][0]["command"][2] = script
    if refused:
        with pytest.raises(TemplateError, match="password on its command line"):
            backup_job(yaml.safe_dump(job), BACKUP_CM, "1")
    else:
        made = backup_job(yaml.safe_dump(job), BACKUP_CM, "1")
        assert made["metadata"]["generateName"] == "slurmdbd-backup-"


def test_the_audit_refuses_what_the_role_does_not_grant() -> None:
    def req(method: str, path: str, verb: str, resource: str) -> Request:
        return Request(method, path, 200, "", None, verb, resource, TOKEN)

    rules = _rules()
    allowed = req(
        "PATCH", "/apis/apps/v1/namespaces/slurm/statefulsets/slurmctld/scale", "patch", "statefulsets/scale"
    )
    other = req(
        "PATCH", "/apis/apps/v1/namespaces/slurm/statefulsets/web/scale", "patch", "statefulsets/scale"
    )
    secret = req("GET", "/api/v1/namespaces/slurm/secrets/slurmdbd-conf", "get", "secrets")
    assert forbidden([allowed], rules) == []
    assert forbidden([other, secret], rules) == [
        "patch apps/statefulsets/scale web",
        "get /secrets slurmdbd-conf",
    ]


# ---------------------------------------------------------------------------------- the upgrade
async def test_a_whole_upgrade_through_kubernetes_keeps_every_job(kube: Kube) -> None:
    c, fake = kube.cluster, kube.fake
    spanning, held, before = await _submit(kube)
    first = len(fake.requests)
    up = kube.upgrade()
    assert await up.run() == "complete", up.status.report()
    assert _states(up) == dict.fromkeys(("preflight", "slurmdbd", "slurmctld", "workers"), "done")
    versions = await kube.roles.versions()
    assert {str(v) for v in versions.values()} == {str(kube.target)}
    # the workloads carry the new images; only their own container changed
    sts = fake.stateful_sets[(NAMESPACE, "slurmctld")]
    dbd = fake.deployments[(NAMESPACE, "slurmdbd")]
    assert [x["image"] for x in sts["spec"]["template"]["spec"]["containers"]] == [
        up.status.images["slurmctld"],
        "registry.example/slurm/sidecars:1",
    ]
    assert dbd["spec"]["template"]["spec"]["containers"][0]["image"] == up.status.images["slurmdbd"]
    assert sts["spec"]["replicas"] == 1
    # every job of before is known after; the spanning one completed and is in sacct
    after = await kube.roles.jobs()
    assert set(before) <= set(after) and after[held] == "PENDING"
    assert await finished_record(c, spanning) == ("COMPLETED", "0:0")
    # the backup is where the template's annotation says, and real; the state copy is on the volume
    dumps = list(kube.backups.glob("slurm_acct_db-*.sql"))
    assert len(dumps) == 1 and "CREATE TABLE" in dumps[0].read_text(errors="replace")
    assert up.status.backup.startswith(f"backups/{dumps[0].name} (Job slurmdbd-backup-")
    copies = list((c.dir / ".slurm-sidecars-upgrade").glob("state-*"))
    assert [p.name for p in copies if p.is_dir()] == [up.status.state_copy.split(" ")[0].split("/")[1]]
    manifest = json.loads(next(p for p in copies if p.suffix == ".json").read_text())
    assert any(name.startswith("job_state") for name in manifest)
    assert _state_jobs(kube) == [("copy", 0)]
    # Kubernetes ends each Job at our bound whatever becomes of us; ours runs with no API token, no
    # escalation and no capability beyond copying another's files
    made = list(fake.jobs.values())
    assert made and all(j["spec"]["activeDeadlineSeconds"] == 60 for j in made)
    (copy_job,) = [j for j in made if j["metadata"]["name"].startswith("slurmctld-state-copy-")]
    pod = copy_job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    context = pod["containers"][0]["securityContext"]
    assert context["allowPrivilegeEscalation"] is False and context["capabilities"]["drop"] == ["ALL"]
    # every write of the control plane's identity is one the Role grants, and only these kinds
    writes = fake.writes_by(TOKEN, first)
    assert {(w.verb, w.resource) for w in writes} == {
        ("create", "jobs"),
        ("patch", "deployments"),
        ("patch", "statefulsets"),
        ("patch", "statefulsets/scale"),
    }
    assert forbidden([r for r in fake.requests[first:] if r.token == TOKEN], _rules()) == []
    assert not [n.name for n in await c.client().nodes() if n.state.drain]


@pytest.mark.parametrize(
    "kube", [{"slurmctld": ["-f", "{dir}/etc/refused.conf"]}], indirect=True, ids=["slurmctld"]
)
async def test_a_slurmctld_image_that_never_gets_ready_is_rolled_back_through_the_restore_job(
    kube: Kube, release: Release
) -> None:
    c, fake = kube.cluster, kube.fake
    # a setting the new release does not know: it refuses the whole file at once
    (c.dir / "etc" / "refused.conf").write_text(c.conf_path.read_text() + "NoSuchSetting=1\n")
    spanning, held, before = await _submit(kube)
    up = kube.upgrade()
    assert await up.run() == "rolled_back", up.status.report()
    assert tuple(_states(up).values()) == ("done", "done", "rolled_back", "pending")
    detail = up.status.stage("slurmctld").detail
    # the pod's own words: its container's end, as the kubelet says it, and slurmctld's cause
    assert "ended (Error, exit 1" in detail and "NoSuchSetting" in detail, detail
    # a copy, then a restore, each our own Job run for real
    assert _state_jobs(kube) == [("copy", 0), ("restore", 0)]
    sts = fake.stateful_sets[(NAMESPACE, "slurmctld")]
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == image("slurmctld", release)
    assert sts["spec"]["replicas"] == 1 and sts["status"]["readyReplicas"] == 1
    versions = await kube.roles.versions()
    assert str(versions["slurmctld:slurmctld"]) == release.version
    after = await kube.roles.jobs()
    assert set(before) <= set(after) and after[held] == "PENDING"
    kube.go.touch()  # the job that spanned the failed upgrade completes, and is recorded
    await c.wait_job(spanning, "COMPLETED", timeout=60)
    assert await finished_record(c, spanning) == ("COMPLETED", "0:0")


async def test_a_failed_backup_job_halts_before_slurmdbd_is_touched(kube: Kube) -> None:
    c, fake = kube.cluster, kube.fake
    assert c.database is not None
    # the operator's template names a socket that is not there: mariadb-dump fails for real
    kube.put_template(backup_template(c.database.socket.parent, "gone.sock"))
    dbd_pid, ctld_pid = c.hostpid("slurmdbd"), c.foreground_pid()
    dbd_before = json.dumps(fake.deployments[(NAMESPACE, "slurmdbd")], sort_keys=True)
    up = kube.upgrade()
    assert await up.run() == "failed", up.status.report()
    assert tuple(_states(up).values()) == ("done", "failed", "pending", "pending")
    detail = up.status.stage("slurmdbd").detail
    assert "database backup Job slurmdbd-backup-" in detail and "BackoffLimitExceeded" in detail, detail
    assert "gone.sock" in detail, detail  # mariadb-dump's own words, from the pod
    # slurmdbd untouched: the same workload, the same process; slurmctld too
    assert json.dumps(fake.deployments[(NAMESPACE, "slurmdbd")], sort_keys=True) == dbd_before
    assert (c.hostpid("slurmdbd"), c.foreground_pid()) == (dbd_pid, ctld_pid)
    assert not fake.answered("PATCH", "/statefulsets/")


async def test_what_is_missing_or_unsafe_is_refused_before_anything_changes(kube: Kube) -> None:
    fake = kube.fake
    first = len(fake.requests)

    async def preflight_says(words: str) -> None:
        up = kube.upgrade()
        assert await up.run() == "failed", up.status.report()
        detail = up.status.stage("preflight").detail
        assert words in detail and "\n" not in detail, detail
        assert _states(up)["slurmdbd"] == "pending"

    # a template with the password written in it, on the command line or in the environment
    secret_arg = yaml.safe_load(backup_template(Path("/x"), "s"))
    secret_arg["spec"]["template"]["spec"]["containers"][0]["command"][2] += " --password=hunter2"
    kube.put_template(yaml.safe_dump(secret_arg))
    await preflight_says("container dump has a password on its command line")
    secret_env = yaml.safe_load(backup_template(Path("/x"), "s"))
    secret_env["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "MYSQL_PWD", "value": "hunter2"}
    ]
    kube.put_template(yaml.safe_dump(secret_env))
    await preflight_says("env MYSQL_PWD holds its value in the template")
    assert not [e for e in kube.events if "hunter2" in e[2]]  # the password is never said back
    # a pod of the template's own shape: the munge key's Secret mounted, another account's token
    munge = yaml.safe_load(backup_template(Path("/x"), "s"))
    munge["spec"]["template"]["spec"]["volumes"].append(
        {"name": "key", "secret": {"secretName": "slurm-auth"}}
    )
    kube.put_template(yaml.safe_dump(munge))
    await preflight_says("at most one volume, a PersistentVolumeClaim")
    account = yaml.safe_load(backup_template(Path("/x"), "s"))
    account["spec"]["template"]["spec"]["serviceAccountName"] = "slurm-sidecars-control-plane"
    kube.put_template(yaml.safe_dump(account))
    await preflight_says("the pod spec may not set serviceAccountName")
    # no template there at all
    del fake.config_maps[(NAMESPACE, BACKUP_CM)]
    await preflight_says(f"ConfigMap {BACKUP_CM} with the backup Job's template (key job.yaml) is not there")
    # a workload named that does not exist, and the control plane inside slurmctld's own pod
    names = kube.roles.names
    moved = replace(
        names.upgrade, slurmdbd_workload=("Deployment", "accounting"), without_database_backup=True
    )
    kube.roles.names = replace(names, upgrade=moved)
    await preflight_says("Deployment slurm/accounting is not there")
    back = replace(moved, slurmdbd_workload=("Deployment", "slurmdbd"))
    kube.roles.names = replace(names, upgrade=back, own_pod="slurmctld-0")
    await preflight_says("this control plane runs in slurmctld-0, a pod of StatefulSet slurmctld")
    # slurmctld's StatefulSet owned by an operator (Slinky's Controller): it would undo our patches
    kube.roles.names = replace(kube.roles.names, own_pod="control-plane-5f7d9-abcde")
    sts = fake.stateful_sets[(NAMESPACE, "slurmctld")]
    sts["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "slinky.slurm.net/v1beta1",
            "kind": "Controller",
            "name": "slurm",
            "uid": "4f1d2c3b-0000-4000-8000-000000000001",
            "controller": True,
        }
    ]
    await preflight_says("StatefulSet slurmctld is managed by Controller/slurm")
    del sts["metadata"]["ownerReferences"]
    # nothing was written by any of them
    assert fake.writes_by(TOKEN, first) == []


async def test_the_control_plane_builds_the_roles_from_its_settings_or_names_what_is_missing(
    kube: Kube,
) -> None:
    c, newer = kube.cluster, kube.kubelet.releases["26.05"]
    body = {
        "slurm_version": "26.05",
        "images": {
            "slurmdbd": image("slurmdbd", newer),
            "slurmctld": image("slurmctld", newer),
            "slurmd": "r2",
        },
    }
    # no workload named: refused in one line that names each flag missing, nothing started
    async with control_plane(c, kube_url=kube.url) as bare:
        status, text = await bare.post("/v1/upgrade/cluster", body)
        assert status == 409, text
        for flag in (
            "--upgrade-slurmdbd-workload",
            "--upgrade-slurmctld-statefulset",
            "--upgrade-state-image",
            "--upgrade-backup-job-configmap",
        ):
            assert flag in text, text
        assert "\n" not in text.strip()
        assert (await bare.get("/v1/upgrade"))[1]["cluster"] is None
    # named: the start is taken, and its preflight reads the workloads through the API (here it
    # finds the control plane inside slurmctld's own pod, and refuses before anything changes)
    first = len(kube.fake.requests)
    async with control_plane(
        c,
        kube_url=kube.url,
        pod_name="slurmctld-0",
        upgrade=UPGRADE,
    ) as named:
        status, text = await named.post("/v1/upgrade/cluster", body)
        assert status == 201, text

        async def report() -> dict[str, Any]:
            return dict((await named.get("/v1/upgrade"))[1]["cluster"])

        ended = await eventually(report, lambda r: r["state"] != "running", within=60, what="the preflight")
        assert ended["state"] == "failed", ended
        assert "runs in slurmctld-0, a pod of StatefulSet slurmctld" in ended["stages"][0]["detail"]
    reads = {(r.verb, r.resource) for r in kube.fake.requests[first:] if r.verb == "get"}
    assert {("get", "statefulsets"), ("get", "deployments")} <= reads
    assert not [r for r in kube.fake.mutating(first) if r.resource in ("statefulsets", "deployments", "jobs")]


async def test_the_whole_upgrade_through_the_control_plane_with_its_own_roll_of_the_workers(
    kube: Kube, release: Release
) -> None:
    """Started through the API of a control plane whose settings name the workloads: every stage
    acts through Kubernetes, the workers' too (the control plane's budgeted roll deletes each drained
    worker's pod; the StatefulSet brings it back on the new revision, its slurmd on 26.05)."""
    c, fake = kube.cluster, kube.fake
    newer = kube.kubelet.releases["26.05"]
    kube.kubelet.create_workers("r2411", {"r2411": release, "r2605": newer})
    kube.kubelet.worker_revision = "r2605"  # the operator applied the workers' new template (OnDelete)
    spanning, held, before = await _submit(kube)
    body = {
        "slurm_version": "26.05",
        "images": {
            "slurmdbd": image("slurmdbd", newer),
            "slurmctld": image("slurmctld", newer),
            "slurmd": "r2605",
        },
    }
    async with control_plane(
        c,
        kube_url=kube.url,
        pod_name="control-plane-0",
        reads={"interval_seconds": 1.0},
        upgrade=UPGRADE | {"rollout_timeout_seconds": 60.0, "job_timeout_seconds": 60.0},
    ) as plane:
        status, text = await plane.post("/v1/upgrade/cluster", body)
        assert status == 201, text

        async def report() -> dict[str, Any]:
            return dict((await plane.get("/v1/upgrade"))[1]["cluster"])

        await eventually(
            report, lambda r: r["stages"][3]["state"] == "running", within=180, what="the workers"
        )
        kube.go.touch()  # the roll waits for the job on its worker: it ends now, as jobs do
        ended = await eventually(
            report, lambda r: r["state"] != "running", within=180, what="the upgrade's end"
        )
        assert ended["state"] == "complete", ended
    versions = await kube.roles.versions()
    assert {str(v) for v in versions.values()} == {str(kube.target)}
    workers = [p for p in fake.pods.values() if p["metadata"]["labels"].get("app") == "slurmd"]
    assert len(workers) == 2 and {p["metadata"]["labels"]["controller-revision-hash"] for p in workers} == {
        "r2605"
    }
    after = await kube.roles.jobs()
    assert set(before) <= set(after) and after[held] == "PENDING"
    assert await finished_record(c, spanning) == ("COMPLETED", "0:0")
    assert not [n.name for n in await c.client().nodes() if n.state.drain]


async def test_a_failed_state_copy_puts_the_old_slurmctld_back_on_its_own_state(
    kube: Kube, release: Release
) -> None:
    c = kube.cluster
    # the copies' place on the volume is taken by a file: the copy Job cannot make its directory
    (c.dir / ".slurm-sidecars-upgrade").write_text("not a directory")
    spanning, held, before = await _submit(kube)
    up = kube.upgrade()
    assert await up.run() == "rolled_back", up.status.report()
    assert tuple(_states(up).values()) == ("done", "done", "rolled_back", "pending")
    detail = up.status.stage("slurmctld").detail
    assert "state copy Job" in detail and "rolled back: the old slurmctld runs on its own state" in detail, (
        detail
    )
    assert _state_jobs(kube) == [("copy", 1)]  # no restore Job: the state was never touched
    for node in c.node_names:  # registered again with the restarted controller, on their release
        await c.wait_node(node, lambda n: n.state.registered and n.version is not None, timeout=60)
    versions = await kube.roles.versions()
    assert {str(v) for d, v in versions.items() if d != "slurmdbd"} == {release.version}
    after = await kube.roles.jobs()
    assert set(before) <= set(after) and after[held] == "PENDING" and after[spanning] == "RUNNING"
    kube.go.touch()


async def test_a_slurmdbd_failing_its_conversion_ends_its_container_and_halts_not_rolled_back(
    kube: Kube,
) -> None:
    c, fake = kube.cluster, kube.fake
    assert c.database is not None
    spanning, held, before = await _submit(kube)
    # the database user may no longer change tables: the new slurmdbd's conversion fails
    await c.database.sql(f"REVOKE ALTER ON `{c.database.name}`.* FROM '{c.database.user}'@'127.0.0.1';")
    up = kube.upgrade()
    assert await up.run() == "failed", up.status.report()
    assert tuple(_states(up).values()) == ("done", "failed", "pending", "pending")
    detail = up.status.stage("slurmdbd").detail
    # the pod's words, the machine's refusal to go back blindly, and the backup to go back from
    assert "of Deployment slurmdbd ended (Error, exit 1" in detail and "ALTER command denied" in detail, (
        detail
    )
    assert "not rolled back" in detail and up.status.backup in detail, detail
    assert list(kube.backups.glob("slurm_acct_db-*.sql"))
    # slurmctld never touched: no patch of its StatefulSet, every job still there
    assert not fake.answered("PATCH", "/statefulsets/")
    after = await kube.roles.jobs()
    assert set(before) <= set(after) and after[spanning] == "RUNNING" and after[held] == "PENDING"
    kube.go.touch()


@pytest.mark.parametrize(
    "kube", [{"slurmctld": ["-f", "{dir}/etc/refused.conf"]}], indirect=True, ids=["slurmctld"]
)
async def test_a_slurmctld_container_that_ends_at_start_is_rolled_back_at_its_first_exit_in_its_words(
    kube: Kube, release: Release
) -> None:
    c = kube.cluster
    # a plugin 26.05 does not have: its container ends at once, and the pod shows its first exit
    # (terminated, no restart yet) with the end of its log as the termination message
    (c.dir / "etc" / "refused.conf").write_text(c.conf_path.read_text() + "TopologyPlugin=topology/nosuch\n")
    kube.kubelet.first_exit = True
    _, held, before = await _submit(kube)
    up = kube.upgrade()
    assert await up.run() == "rolled_back", up.status.report()
    stage = up.status.stage("slurmctld")
    assert "fatal:" in stage.last_words and "topology" in stage.last_words.lower(), stage
    assert "CrashLoopBackOff" not in stage.detail and stage.last_words in stage.detail, stage.detail
    assert stage.died_at is not None and stage.acted_at is not None
    after = stage.acted_at - stage.died_at
    print(
        f"\nslurmctld's container ended; the rollback began {after:.2f} s after: {stage.last_words}; "
        f"the stage {stage.seconds} s, slurmctld unanswered {up.status.slurmctld_unanswered_seconds} s"
    )
    # the kubelet's finishedAt has whole seconds: up to 1 s more than the death itself
    assert after <= 3.0, after
    assert _state_jobs(kube) == [("copy", 0), ("restore", 0)]
    sts = kube.fake.stateful_sets[(NAMESPACE, "slurmctld")]
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == image("slurmctld", release)
    after_jobs = await kube.roles.jobs()
    assert set(before) <= set(after_jobs) and after_jobs[held] == "PENDING"
