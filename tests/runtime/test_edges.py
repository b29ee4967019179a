"""The package's edges are checked, not promised.

Imports are import-linter's ([tool.importlinter] in pyproject.toml; `make lint` runs it): these tests
show that it passes on the tree and fails on a breach. What imports cannot show is checked here on
the syntax tree: only `sidecars/runtime/process.py` starts a process, and only the Slurm edge (and
the dev tooling that starts real Slurm daemons: devcluster, demo) names a Slurm command.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecars.slurm import naming

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sidecars"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

# the runner itself; everything else runs a child process through it
RUNNER = "sidecars/runtime/process.py"
# may name Slurm commands: the edge that runs them, and the dev tooling that starts real daemons
SLURM_ALLOWED = ("sidecars/slurm/", "sidecars/devcluster/", "sidecars/demo/")
SLURM_COMMANDS = naming.COMMANDS  # Slurm's programs: the list the metrics' labels come from
CREATE_SUBPROCESS = frozenset({"create_subprocess_exec", "create_subprocess_shell"})
OS_PROCESS = frozenset({"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp"})


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants (they may well mention `scontrol`)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _error_arguments(tree: ast.AST) -> set[int]:
    """ids of everything inside an exception's constructor: an argv recorded in an error (what a
    failed lookup was about) names a command in a message and runs nothing."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _name(node.func).endswith(("Error", "Exception")):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                out.update(id(n) for n in ast.walk(arg))
    return out


def process_starts(source: str) -> list[str]:
    """Where `source` starts a child process (or imports what does) other than through the runner."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [f"{line}: import {a.name}" for a in node.names if a.name.split(".")[0] == "subprocess"]
            found += [f"{line}: import {a.name}" for a in node.names if a.name == "asyncio.subprocess"]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod.split(".")[0] == "subprocess" or mod == "asyncio.subprocess":
                found.append(f"{line}: from {mod} import ...")
            found += [
                f"{line}: from {mod} import {a.name}"
                for a in node.names
                if a.name in CREATE_SUBPROCESS
                or (mod == "asyncio" and a.name == "subprocess")
                or (mod == "os" and (a.name in OS_PROCESS or a.name.startswith(("spawn", "exec"))))
            ]
        elif isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else ""
            if node.attr in CREATE_SUBPROCESS or (owner == "asyncio" and node.attr == "subprocess"):
                found.append(f"{line}: {owner}.{node.attr}")
            elif owner == "os" and (node.attr in OS_PROCESS or node.attr.startswith(("spawn", "exec"))):
                found.append(f"{line}: os.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in CREATE_SUBPROCESS:
            found.append(f"{line}: {node.id}")
    return sorted(set(found))


def _fstring_text(tree: ast.AST) -> set[int]:
    """ids of the text parts of f-strings: a line printed for people (`f"slurmd {node}"`) runs
    nothing; an argv is a list or tuple of words, which stays checked."""
    return {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}


def slurm_commands(source: str) -> list[str]:
    """Where `source` names a Slurm command in code (an argv, a command word, a program path):
    every string constant that is one, or a path to one, except docstrings, error messages and
    f-string text."""
    tree = ast.parse(source)
    skip = _docstrings(tree) | _error_arguments(tree) | _fstring_text(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            word = node.value.strip()
            if word in SLURM_COMMANDS or (os.path.basename(word) in SLURM_COMMANDS and "/" in word):
                found.append(f"{node.lineno}: {node.value!r}")
    return found


def _modules() -> Iterator[tuple[str, str]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(ROOT).as_posix(), path.read_text()


def test_only_the_runner_starts_processes() -> None:
    found = {rel: hits for rel, src in _modules() if rel != RUNNER and (hits := process_starts(src))}
    assert found == {}, "start child processes through sidecars.runtime.process"
    assert process_starts((ROOT / RUNNER).read_text())  # the check sees what the runner does


def test_only_the_slurm_edge_names_slurm_commands() -> None:
    found = {
        rel: hits
        for rel, src in _modules()
        if not rel.startswith(SLURM_ALLOWED) and (hits := slurm_commands(src))
    }
    assert found == {}, "run Slurm commands through sidecars.slurm (SlurmClient)"
    assert slurm_commands((PACKAGE / "slurm" / "client.py").read_text())  # it sees the edge's own


def test_the_checks_catch_each_kind_of_breach() -> None:
    breaches = {
        "import subprocess\nsubprocess.run(['true'])": 1,
        "from subprocess import run": 1,
        "import asyncio\nasync def f():\n    await asyncio.create_subprocess_exec('true')": 1,
        "from asyncio import create_subprocess_shell as spawn": 1,
        "import asyncio\nx = asyncio.subprocess.PIPE": 1,
        "import os\nos.system('true')": 1,
        "import os\nos.execvp('true', ['true'])": 1,
        "from os import posix_spawn": 1,
    }
    for source, count in breaches.items():
        assert len(process_starts(source)) == count, source
    assert process_starts("import os, signal\nos.kill(1, signal.SIGTERM)\nos.killpg(1, 9)") == []
    assert slurm_commands("async def f(c):\n    await c.run('scontrol', 'show', 'config')") == [
        "2: 'scontrol'"
    ]
    assert len(slurm_commands("ARGV = ['sinfo', '-h']\nP = ('/usr/bin/squeue',)\nD = {'sdiag': 1}")) == 3
    allowed = (
        '"""Reads `scontrol show config`."""\n'
        "def f(argv):\n"
        '    """scontrol"""\n'
        "    raise SlurmError(('scontrol', 'show', 'node'), 'lookup failed')\n"
        "MSG = 'scontrol shutdown failed'\n"
        "B = b'slurmd'\n"
        "line = f'  slurmd {node:<16}'\n"
    )
    assert slurm_commands(allowed) == []
    # an argv stays a breach, wherever it sits, and an f-string's placeholder is code
    assert len(slurm_commands("D = {'show': ['scontrol', 'show']}\nrun(('slurmd', '-V'))")) == 2
    assert len(slurm_commands("x = f'{run(\"sinfo\")}'")) == 1


@pytest.mark.parametrize("package", ["sidecars", "sidecars.controlplane"])
def test_every_module_of_the_package_has_its_layer(package: str) -> None:
    """A new module or package outside the layers (the package's, the control plane's wings')
    would be checked by nothing."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    (layers,) = [
        ls for ls in contracts if {m.strip().rpartition(".")[0] for m in ls[0].split("|")} == {package}
    ]
    placed = {m.strip() for layer in layers for m in layer.split("|")}
    folder = ROOT.joinpath(*package.split("."))
    top = {f"{package}.{p.stem}" for p in folder.iterdir() if p.suffix == ".py" and p.stem != "__init__"}
    top |= {f"{package}.{p.name}" for p in folder.iterdir() if (p / "__init__.py").exists()}
    assert top == placed


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # this copy, not the installed package
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    shutil.copytree(PACKAGE, tmp_path / "sidecars", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def test_the_import_contracts_hold_and_each_breach_breaks_one(tree_copy: Path) -> None:
    kept = _lint(tree_copy)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "0 broken" in kept.stdout
    breaches = {
        # a lower layer reaching up: the runtime importing a role
        "runtime/breach.py": (
            "from sidecars.worker import service\n",
            "sidecars.runtime.breach -> sidecars.worker",
        ),
        # two roles depending on each other
        "worker/breach.py": (
            "import sidecars.controlplane.http.api\n",
            "sidecars.worker.breach -> sidecars.controlplane",
        ),
        # the control plane's fleet (what it knows) reaching up into what it serves
        "controlplane/fleet/breach.py": (
            "from sidecars.controlplane.http import api\n",
            "sidecars.controlplane.fleet.breach -> sidecars.controlplane.http.api",
        ),
        # the Kubernetes client outside its edge
        "configsync/breach.py": (
            "import kubernetes_asyncio\n",
            "sidecars.configsync.breach -> kubernetes_asyncio",
        ),
    }
    for rel, (source, _) in breaches.items():
        (tree_copy / "sidecars" / rel).write_text(source)
    broken = _lint(tree_copy)
    assert broken.returncode != 0
    assert "3 broken" in broken.stdout, broken.stdout
    for _, shown in breaches.values():
        assert shown in broken.stdout, (shown, broken.stdout)
