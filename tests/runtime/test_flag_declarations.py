"""One way to declare a flag: a `setting()` field of a role's frozen settings class. Its name,
variable, converter, default and help then come from one declaration, into `--help`, the value the
role reads, and docs/flags.md alike.

Every option of every command, the command line's own (`--log-level`) included, is looked at as the
parser built by the CLI holds it: a flag made any other way (a `Flag(...)` added by hand, a raw
`parser.add_argument`) fails here. There is no list of exceptions: a switch (`demo --tour`) and a
short spelling (`plan -f`) are `setting()` fields too.
"""

from __future__ import annotations

import argparse

import pytest

from sidecars.cli import build_parser, parse
from sidecars.demo.main import DemoSettings
from sidecars.operator.plan.settings import PlanSettings
from sidecars.runtime import logs
from sidecars.runtime.settings import TEXT, Flag, add_flag, env_name, settings_from


def declared_another_way(parser: argparse.ArgumentParser, command: str) -> set[tuple[str, str]]:
    """The options of `parser` that no `setting()` field declares."""
    out = set()
    for action in parser._actions:
        if (
            not action.option_strings
            or action.dest == "help"
            or isinstance(action, argparse._SubParsersAction)
        ):
            continue
        flag = getattr(action, "sidecars_flag", None)
        # a setting() field's flag knows the field it fills; a Flag(...) made by hand does not
        if not (isinstance(flag, Flag) and flag.path):
            out.add((command, max(action.option_strings, key=len)))
    return out


def every_command() -> set[tuple[str, str]]:
    parser, commands = build_parser()
    found = declared_another_way(parser, "")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in commands:
        found |= declared_another_way(sub.choices[name], name)
    return found


def test_every_flag_is_a_setting_field() -> None:
    found = sorted(every_command())
    assert not found, f"declare these as setting() fields of the role's settings class: {found}"


def test_the_check_sees_the_other_ways() -> None:
    """A `Flag(...)` added by hand and a raw option are each caught."""
    p = argparse.ArgumentParser()
    add_flag(p, Flag(name="--lone", help="x", conv=TEXT))
    p.add_argument("--raw")
    assert declared_another_way(p, "x") == {("x", "--lone"), ("x", "--raw")}


def test_the_command_lines_own_flags_come_from_the_environment_too(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("--log-level", "--log-format"):
        monkeypatch.delenv(env_name(var), raising=False)
    monkeypatch.setenv(env_name("--log-level"), "debug")
    args = parse(["--log-format", "json", "probe", "livez", "--url", "http://127.0.0.1:1"])
    assert logs.asked(args) == logs.LogSettings(log_level="debug", log_format="json")


@pytest.mark.parametrize(
    ("argv", "tour"),
    [([], False), (["--tour"], True), (["--tour=true"], True), (["--tour", "false"], False)],
)
def test_a_switch_alone_means_true(argv: list[str], tour: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(env_name("--tour"), raising=False)
    settings = settings_from(DemoSettings, parse(["demo", *argv, "--nodes", "4"]))
    assert (settings.tour, settings.nodes) == (tour, 4)


def test_a_short_spelling_is_the_flag_itself() -> None:
    short, long = (PlanSettings.from_args(parse(["plan", f, "-"])) for f in ("-f", "--filename"))
    assert short == long and short.filename == "-"
