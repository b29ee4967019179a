"""`main` and `configure` in the same place in every role: each command the CLI offers is its own
package's `main.py`, holding `configure(parser)` and `main(args)`."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from sidecars.cli import COMMANDS, Command

# commands whose package belongs to another piece of work this session, still where they were; the
# second test fails once one of them moves, so that it leaves this list with the move
NOT_YET = {
    "config-guard": "sidecars.configsync.guard",
    "control-plane": "sidecars.controlplane.service",
}


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if c.name not in NOT_YET], ids=lambda c: c.name)
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


def test_the_commands_not_yet_moved_are_where_the_list_says() -> None:
    where = {c.name: c.module for c in COMMANDS if c.name in NOT_YET}
    assert where == NOT_YET
