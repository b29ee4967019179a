"""docs/architecture.md is the newcomer's map: every path and module it names exists, every module
of the control plane and of config-sync is on it, and every relative link in the front pages leads
somewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent
MAP = ROOT / "docs" / "architecture.md"
FRONT = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def _modules(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*.py") if p.name != "__init__.py"}


def test_every_path_the_map_names_exists() -> None:
    text = MAP.read_text()
    paths = {m.rstrip(".,)") for m in re.findall(r"(?:sidecars|tests|scripts)/[A-Za-z0-9_/.]+", text)}
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"
    basenames = {p.name for d in ("sidecars", "tests", "scripts") for p in (ROOT / d).rglob("*.py")}
    named = set(re.findall(r"\b([a-z_][a-z0-9_]*\.py)\b", text))
    assert not named - basenames, f"modules named that do not exist: {sorted(named - basenames)}"


def test_every_control_plane_module_is_on_the_map() -> None:
    text = MAP.read_text()
    absent = sorted(m for m in _modules(ROOT / "sidecars" / "controlplane") if Path(m).name not in text)
    assert not absent, f"control-plane modules missing from docs/architecture.md: {absent}"


def test_every_config_sync_module_is_on_the_map() -> None:
    text = MAP.read_text()
    absent = sorted(m for m in _modules(ROOT / "sidecars" / "configsync") if Path(m).name not in text)
    assert not absent, f"config-sync modules missing from docs/architecture.md: {absent}"


def test_every_relative_link_leads_somewhere() -> None:
    broken = []
    for page in FRONT:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, f"links to nothing: {broken}"
