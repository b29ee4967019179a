"""Slurm's upgrade window as the whole-cluster upgrade's preflight applies it to every daemon: three
releases back since 24.11 (two before), no downgrade, every release known, Slurm's order kept."""

from __future__ import annotations

from sidecars.controlplane.changes.cluster_upgrade.window import refusal, window
from sidecars.slurm import Version


def v(text: str) -> Version:
    return Version.parse(text)


def cluster(dbd: str, ctld: str, *slurmds: str) -> dict[str, Version]:
    found = {"slurmdbd": v(dbd), "slurmctld:c1": v(ctld)}
    found.update({f"slurmd:n{i}": v(s) for i, s in enumerate(slurmds, 1)})
    return found


def test_the_window_is_three_releases_since_24_11() -> None:
    assert window(v("26.05.5")) == 3 and window(v("24.11.0")) == 3
    assert window(v("24.05.1")) == 2


def test_a_target_within_the_window_of_every_daemon_is_taken() -> None:
    assert refusal(v("26.05.5"), cluster("24.11.5", "24.11.5", "24.11.5", "24.11.1")) is None
    assert refusal(v("26.05.5"), cluster("26.05.5", "25.11.2", "24.11.5")) is None  # part way through


def test_a_daemon_too_far_behind_is_refused_naming_it() -> None:
    why = refusal(v("26.05.5"), cluster("24.11.5", "24.11.5", "24.11.5", "24.05.3"))
    assert why is not None and why.startswith("slurmd:n2 runs 24.05.3, 4 releases behind 26.05.5")
    assert "intermediate release" in why
    before = refusal(v("24.05.1"), cluster("22.05.8", "22.05.8"))  # two back before 24.11: 23.02
    assert before is not None and "3 releases behind" in before


def test_a_downgrade_is_refused() -> None:
    why = refusal(v("24.11.5"), cluster("25.05.1", "24.11.5"))
    assert why is not None and "slurmdbd runs 25.05.1, newer than the target" in why


def test_every_release_must_be_known() -> None:
    no_dbd = {"slurmctld:c1": v("24.11.5")}
    assert "slurmdbd's release was not read" in (refusal(v("26.05.5"), no_dbd) or "")
    no_ctld = {"slurmdbd": v("24.11.5")}
    assert "slurmctld's release was not read" in (refusal(v("26.05.5"), no_ctld) or "")
    # a cluster without accounting has no slurmdbd to read; its controllers and workers still count
    assert refusal(v("26.05.5"), no_dbd, accounting=False) is None
    ha = {"slurmctld:ctld-a": v("24.11.5"), "slurmctld:ctld-b": v("23.11.1"), "slurmd:n1": v("24.11.5")}
    assert "slurmctld:ctld-b runs 23.11.1, 5 releases behind" in (
        refusal(v("26.05.5"), ha, accounting=False) or ""
    )
    assert "slurmctld's release was not read" in (refusal(v("26.05.5"), {}, accounting=False) or "")


def test_a_cluster_out_of_slurms_order_is_refused() -> None:
    why = refusal(v("26.05.5"), cluster("24.11.5", "25.05.1", "24.11.5"))
    assert why is not None and "slurmdbd runs 24.11.5, older than slurmctld:c1" in why
    why = refusal(v("26.05.5"), cluster("25.05.1", "24.11.5", "25.05.1"))
    assert why is not None and "older than slurmd:n1" in why
