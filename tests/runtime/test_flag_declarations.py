"""One way to declare a flag: a `setting()` field of a role's frozen settings class. Its name,
variable, converter, default and help then come from one declaration, into `--help`, the value the
role reads, and docs/flags.md alike.

Every option of every command is looked at as the parser built by the CLI holds it: a flag made by
a module-level `Flag(...)`, a bare `flag(parser, ...)` whose text the role converts by hand, or a
raw `parser.add_argument` fails here. The flags not yet moved are listed below, by command; the
list only shrinks (a flag moved and still listed fails too, so the list cannot go stale).
"""

from __future__ import annotations

import argparse

from sidecars.cli import build_parser
from sidecars.runtime.settings import Flag

# (command, flag) declared another way, left to move ("" is the command line's own options).
NOT_YET: frozenset[tuple[str, str]] = frozenset(
    {
        # the command line's own, read before any role is loaded
        ("", "--log-level"),
        ("", "--log-format"),
        # config-sync: its layout is being reworked (#38, its wings)
        ("config-sync", "--http"),
        ("config-guard", "--target"),
        ("plan", "-f"),  # kubectl's short alias of --filename
        # switches without a value, and a choice that may be empty
        *(("demo", f) for f in ("--tour", "--accounting", "--upgrade-to")),
    }
)


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
        # a setting() field's flag knows the field it fills; a Flag(...) or flag(...) does not
        if not (isinstance(flag, Flag) and flag.declared and flag.path):
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
    found = every_command()
    new = sorted(found - NOT_YET)
    assert not new, f"declare these as setting() fields of the role's settings class: {new}"
    moved = sorted(NOT_YET - found)
    assert not moved, f"these are setting() fields now: take them off NOT_YET: {moved}"


def test_the_check_sees_the_other_ways() -> None:
    """A `Flag(...)` added whole, a bare `flag(...)` and a raw option are each caught."""
    from sidecars.runtime.settings import TEXT, add_flags, flag

    p = argparse.ArgumentParser()
    add_flags(p, Flag(name="--lone", help="x", conv=TEXT))
    flag(p, "--bare", help="x")
    p.add_argument("--raw")
    assert declared_another_way(p, "x") == {("x", "--lone"), ("x", "--bare"), ("x", "--raw")}
