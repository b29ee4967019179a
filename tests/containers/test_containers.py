"""The images built here with podman, the compose stack and the manifests' pods run for real.

Slow (a fresh build takes minutes on this machine): select with `-m containers`, leave out with
`-m "not containers"`. Each run uses its own compose project / pod names; the scripts remove what
they made on every path, and the guard below checks that nothing of this session is left.
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
pytestmark = [pytest.mark.containers, pytest.mark.timeout(1800)]


def _podman_names(kind: str) -> set[str]:
    fmt = "{{.Name}}" if kind in {"volume", "network", "pod"} else "{{.Names}}"
    argv = (
        ["podman", kind, "ls", "--format", fmt]
        if kind != "container"
        else ["podman", "ps", "-a", "--format", fmt]
    )
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    return set(r.stdout.split())


def run_script(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run one of scripts/; if the test is cut short, SIGTERM lets the script take down what it
    made (subprocess.run would SIGKILL it)."""
    proc = subprocess.Popen([PY, *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=1500)
    except BaseException:
        proc.terminate()
        proc.communicate(timeout=180)
        raise
    print(out)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _remove_ours(left: dict[str, set[str]]) -> None:
    for kind, argv in (("pod", ["pod", "rm", "-f"]), ("container", ["rm", "-f"]),
                       ("volume", ["volume", "rm", "-f"]), ("network", ["network", "rm", "-f"])):  # fmt: skip
        if left.get(kind):
            subprocess.run(["podman", *argv, *sorted(left[kind])], capture_output=True, check=False)


@pytest.fixture(scope="module")
def images() -> None:
    r = subprocess.run(["bash", "scripts/images.sh"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    print(r.stdout)
    for role in ("slurmctld", "slurmd"):
        assert f"images: slurm-sidecars/{role}:0.1.0" in r.stdout  # its size was printed


# the names these tests make: compose projects, kube-play pods, networks, volumes and images
OURS = re.compile(
    r"sidecars-(test|kube|broken)-|^(slurmctld|slurmd)-0-[0-9a-f]{8}|^(slurm-auth|slurm-config|slurm-sidecars-token)-[0-9a-f]{8}$"
)


@pytest.fixture(autouse=True)
def _nothing_left() -> Iterator[None]:
    """Beyond what each script checks itself: no container, pod, volume or network of ours that
    was not there before (others' podman objects on this shared machine are not looked at)."""
    before = {k: _podman_names(k) for k in ("container", "pod", "volume", "network")}
    yield
    left = {k: {n for n in _podman_names(k) - before[k] if OURS.search(n)} for k in before}
    _remove_ours(left)  # so that a failure here leaves nothing behind either
    assert not any(left.values()), f"left behind: {left}"


def test_the_images_run_their_commands(images: None) -> None:
    for role, daemon in (("slurmctld", "slurmctld"), ("slurmd", "slurmd")):
        r = subprocess.run(
            ["podman", "run", "--rm", f"slurm-sidecars/{role}:0.1.0",
             "sh", "-c", f"{daemon} -V && slurm-sidecars --help"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert r.returncode == 0 and "slurm-wlm 26.05" in r.stdout and "drain-hook" in r.stdout, r.stderr
    # the wheel carried the web page's package data into the image, and the read-only sidecars
    # find it as a resource; nothing of pip is left
    r = subprocess.run(
        ["podman", "run", "--rm", "--read-only", "--user", "401:401", "slurm-sidecars/slurmctld:0.1.0",
         "/opt/slurm-sidecars/venv/bin/python", "-c",
         "from sidecars.controlplane.http.web import static_files; import importlib.util as u;"
         " print(sorted(static_files())); print(u.find_spec('pip'))"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 0 and "index.html" in r.stdout and r.stdout.strip().endswith("None"), r.stderr


def test_compose_tour_walks_through_the_containers(images: None) -> None:
    r = run_script("scripts/compose_tour.py", "--project", f"sidecars-test-{uuid.uuid4().hex[:8]}")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert r.stdout.count("\n  ok   ") == 6 and "FAIL" not in r.stdout
    assert "no container, volume or network of" in r.stdout


def test_kube_play_runs_the_base_manifests(images: None) -> None:
    r = run_script("scripts/kube_play.py")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "every exec probe passes" in r.stdout and "preStop" in r.stdout and "COMPLETED" in r.stdout


def test_a_broken_command_in_an_image_fails_the_check(images: None, tmp_path: Path) -> None:
    """The same check on images whose sidecar command is broken must fail, and say where."""
    prefix = f"sidecars-broken-{uuid.uuid4().hex[:6]}"
    (tmp_path / "Containerfile").write_text(
        "FROM localhost/slurm-sidecars/slurmd:0.1.0\n"
        "RUN ln -sf /bin/false /opt/slurm-sidecars/bin/slurm-sidecars\n"
    )
    made = [f"localhost/{prefix}/slurmd:0.1.0", f"localhost/{prefix}/slurmctld:0.1.0"]
    try:
        subprocess.run(
            ["podman", "build", "--runtime", "runc", "-t", made[0], str(tmp_path)],
            capture_output=True,
            check=True,
        )
        subprocess.run(["podman", "tag", "slurm-sidecars/slurmctld:0.1.0", made[1]], check=True)
        r = run_script("scripts/kube_play.py", "--prefix", prefix, "--probe-timeout", "60")
        assert r.returncode == 1
        # the first of our commands in the slurmd pod is the munge init step's check-secret: munge
        # never starts, so the check names that container's probe (before that, the worker's)
        assert "FAILED: timed out" in r.stdout, r.stdout
        assert "slurmd/munge startupProbe" in r.stdout or "slurmd/worker startupProbe" in r.stdout, r.stdout
        assert "no pod or network of this run is left" in r.stdout
    finally:
        subprocess.run(["podman", "rmi", "-f", *made], capture_output=True, check=False)
