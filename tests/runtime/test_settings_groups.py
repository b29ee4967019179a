"""A role's settings in groups (`settings_of(prefix=...)`): each group is handed whole to the part
that uses it, while its flags keep the flat names the command line and the environment know."""

from __future__ import annotations

import argparse

from sidecars.controlplane.settings import ControlPlaneSettings, RecycleSettings
from sidecars.runtime.settings import (
    BOOL,
    add_flags,
    declared,
    env_name,
    flags_of,
    number,
    setting,
    settings_from,
    settings_of,
)
from tests.settings import build


@declared()
class Inner:
    tries: int = setting(default=5, conv=number(unit="tries"), help="how many")
    on: bool = setting(default=True, flag="--inner-switch", conv=BOOL, help="named by itself")


@declared()
class Outer:
    plain: str = setting(default="x", help="no group")
    inner: Inner = settings_of(default_factory=Inner, prefix="in_ner")


def test_a_groups_prefix_leads_its_flags_and_variables_and_a_fields_own_flag_wins() -> None:
    flags = {f.name: f for f in flags_of(Outer)}
    assert list(flags) == ["--plain", "--in-ner-tries", "--inner-switch"]
    assert flags["--in-ner-tries"].env == "SIDECARS_IN_NER_TRIES"
    assert [f.path for f in flags.values()] == ["plain", "inner.tries", "inner.on"]


def test_a_group_is_built_from_its_flags_and_from_its_variables() -> None:
    p = argparse.ArgumentParser()
    add_flags(p, Outer, env={env_name("--inner-switch"): "false"})
    got = settings_from(Outer, p.parse_args(["--in-ner-tries", "2"]))
    assert got == Outer(plain="x", inner=Inner(tries=2, on=False))
    assert settings_from(Outer, argparse.ArgumentParser().parse_args([])) == Outer()  # nothing given


def test_the_control_planes_groups_keep_their_flat_flag_names() -> None:
    names = {f.path: f.name for f in flags_of(ControlPlaneSettings)}
    assert names["recycle.grace_seconds"] == "--recycle-grace-seconds"
    assert names["records.deletes_per_pass"] == "--record-deletes-per-pass"
    assert names["conditions.enabled"] == "--pod-conditions"
    assert names["gpu.compute_domains"] == "--compute-domains"
    assert names["upgrade.worker_budget"] == "--upgrade-worker-budget"


def test_a_test_gives_a_group_whole_or_only_the_fields_it_cares_about() -> None:
    quick = build(ControlPlaneSettings)
    assert quick.recycle.grace_seconds == 0.5  # the tests' quick value
    some = build(ControlPlaneSettings, recycle={"fraction": 1.0})
    assert (some.recycle.fraction, some.recycle.grace_seconds) == (1.0, 0.5)  # laid over the quick ones
    whole = build(ControlPlaneSettings, recycle=RecycleSettings())
    assert whole.recycle == RecycleSettings()  # as given: production's defaults
