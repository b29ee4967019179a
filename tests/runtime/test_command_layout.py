"""`main` and `configure` in the same place in every role: each command the CLI offers is its own
package's `main.py`, holding `configure(parser)` and `main(args)`."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from sidecars.cli import COMMANDS, Command


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c.name)
def test_a_command_is_its_package_main_with_configure_and_main(cmd: Command) -> None:
    module_name = cmd.module
    package_name, _, leaf = module_name.rpartition(".")
    assert leaf == "main", f"{module_name}: a command's module is its package's main.py"
    package = importlib.import_module(package_name)
    assert package.__file__ is not None and Path(package.__file__).name == "__init__.py", package_name
    module = importlib.import_module(module_name)
    for name in ("configure", "main"):
        fn = getattr(module, name, None)
        assert callable(fn), f"{module_name}.{name}"
        assert len(inspect.signature(fn).parameters) == 1, f"{module_name}.{name} takes one argument"
