"""The references (docs/flags.md, docs/metrics.md) are generated from the code and must match it;
every metric that the manifests and docs scale or alert on is one the sidecars really export."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import flags_table  # noqa: E402
import metrics_table  # noqa: E402


def _section(path: Path, begin: str, end: str) -> str:
    return path.read_text().split(begin, 1)[1].split(end, 1)[0].strip()


def test_flag_docs_match_the_declarations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIDECARS_DRY_RUN", "off")  # the reference must not depend on this shell
    assert (ROOT / "docs" / "flags.md").read_text() == flags_table.doc_markdown(), (
        "docs/flags.md is stale: run `cd scripts && ../.venv/bin/python flags_table.py --write`"
    )


def test_metrics_reference_matches_the_code() -> None:
    got = _section(metrics_table.DOC, metrics_table.BEGIN, metrics_table.END)
    assert got == metrics_table.metrics_markdown().strip(), (
        "docs/metrics.md is stale: run `cd scripts && ../.venv/bin/python flags_table.py --write`"
    )


def test_every_metric_named_in_manifests_and_docs_exists() -> None:
    exported = {row[0] for row in metrics_table.metric_rows()}
    bases = {re.sub(r"_total$", "", n) for n in exported}
    files = [
        *ROOT.glob("manifests/**/*.yaml"),
        *ROOT.glob("docs/*.md"),
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "docker-compose.yml",
    ]
    named = {(f.name, m) for f in files for m in re.findall(r"slurm_sidecars_[a-z_]+", f.read_text())}
    unknown = sorted(
        (f, m)
        for f, m in named
        if m not in exported and re.sub(r"_(total|bucket|count|sum)$", "", m) not in bases | exported
    )
    assert not unknown, f"metrics named but not exported: {unknown}"
