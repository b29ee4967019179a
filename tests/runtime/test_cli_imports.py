"""Each role loads only its own modules: a worker agent in every pod must not carry the control
plane's Kubernetes client."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("role", "must_not_load"),
    [
        ("worker", ["kubernetes_asyncio", "sidecars.controlplane", "sidecars.configsync"]),
        ("drain-hook", ["kubernetes_asyncio", "sidecars.controlplane", "sidecars.worker.service"]),
        ("probe", ["kubernetes_asyncio", "sidecars.controlplane", "sidecars.worker", "watchfiles"]),
    ],
)
def test_a_role_imports_only_what_it_needs(role: str, must_not_load: list[str]) -> None:
    code = (
        "import sys\nfrom sidecars.cli import build_parser\n"
        f"build_parser(only={role!r})\n"
        "print(' '.join(sorted(m for m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(out.split())
    for name in must_not_load:
        assert not any(m == name or m.startswith(name + ".") for m in loaded), name


def test_every_subcommand_is_listed_without_loading_any_role() -> None:
    code = (
        "import sys\nfrom sidecars.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('LOADED', 'sidecars.controlplane' in sys.modules or 'sidecars.worker' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for name in ("config-sync", "worker", "drain-hook", "control-plane", "probe", "status", "demo"):
        assert name in out
    assert "LOADED False" in out
