"""The web page's files are package data: every one of them is named by pyproject's package-data,
so the wheel (what the images install) carries them, and the server finds them as resources.
(Checked once by hand with `pip wheel`: the wheel lists sidecars/controlplane/http/static/*.)"""

from __future__ import annotations

import fnmatch
import tomllib

from sidecars.controlplane.http.web import STATIC, static_files
from tests.shipping.shipped import ROOT


def test_every_static_file_is_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["sidecars.controlplane.http"]
    folder = ROOT / "sidecars" / "controlplane" / "http" / "static"
    files = sorted(p.relative_to(folder.parent).as_posix() for p in folder.rglob("*") if p.is_file())
    assert files, "no static files found"
    missing = [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"
    # and the server serves exactly what is there: nothing missing, nothing unlisted
    assert {f"static/{n}" for n in ("index.html", *STATIC)} == set(files)
    assert set(static_files()) == {"index.html", *STATIC}
