"""Flags and positionals in any order after a command's name, as kubectl takes them (issue 38):
`maintenance delete --control-plane URL --token-file F NAME` failed with "unrecognized arguments:
NAME", because argparse gives an optional positional nothing when a flag follows the one before it."""

from __future__ import annotations

import argparse
import itertools

import pytest

from sidecars import cli

# (command, its positionals, its flags with their values): every subcommand that takes a positional
CASES = [
    ("maintenance", ["delete", "night-1"], ["--control-plane", "https://cp:9200", "--token-file", "/t"]),
    ("maintenance", ["create", "night-2"], ["--nodes", "gpu[01-08]", "--duration", "4h", "--reason", "r"]),
    ("upgrade", ["start"], ["--control-plane", "https://cp:9200", "--revision", "rev-2"]),
    ("state", ["copy"], ["--state-dir", "/var/spool/slurmctld", "--copy-dir", "/var/spool/copy"]),
    ("probe", ["readyz"], ["--url", "http://127.0.0.1:9100", "--timeout-seconds", "3"]),
]


def _parse(argv: list[str]) -> argparse.Namespace:
    return cli.parse(argv)


def _orders(positionals: list[str], flags: list[str]) -> list[list[str]]:
    """Every placement of the flag pairs around and between the positionals, keeping each order."""
    pairs = [flags[i : i + 2] for i in range(0, len(flags), 2)]
    slots = len(positionals) + 1
    out = []
    for where in itertools.product(range(slots), repeat=len(pairs)):
        argv: list[str] = []
        for slot in range(slots):
            for pair, at in zip(pairs, where, strict=True):
                if at == slot:
                    argv += pair
            if slot < len(positionals):
                argv.append(positionals[slot])
        out.append(argv)
    return out


@pytest.mark.parametrize(("command", "positionals", "flags"), CASES, ids=lambda v: str(v)[:24])
def test_every_order_of_flags_and_positionals_parses_alike(
    command: str, positionals: list[str], flags: list[str]
) -> None:
    orders = _orders(positionals, flags)
    assert len(orders) > 1 or not flags
    expected = vars(_parse([command, *positionals, *flags]))
    for argv in orders:
        assert vars(_parse([command, *argv])) == expected, argv


def test_flags_before_the_last_positional_reach_the_command() -> None:
    args = _parse(["maintenance", "delete", "--control-plane", "https://cp:9200", "--token-file", "/t", "w1"])
    assert (args.command, args.action, args.name, args.token_file) == ("maintenance", "delete", "w1", "/t")


def test_global_flags_still_go_before_the_command() -> None:
    args = _parse(["--log-level", "debug", "probe", "--url", "http://127.0.0.1:1", "livez"])
    assert (args.log_level, args.command, args.which) == ("debug", "probe", "livez")


def test_a_surplus_positional_is_still_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["maintenance", "list", "--token-file", "/t", "extra", "more"]) == 2
    assert "unrecognized arguments: more" in capsys.readouterr().err
