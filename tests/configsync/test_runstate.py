"""What config-sync holds of a node across its reconfigure (runstate.hold), decided from the fleet
read and the two sets alone: run-time values only, none the change itself sets, none Slurm's own,
and no DOWN of a record whose slurmd never registered (that would hold every change of a large
cluster for the registration wait). The put-back on real Slurm: test_node_state_kept.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sidecars.configsync.apply.runstate import Held, hold, lost, would_wipe
from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.protocol.drains import REASON_PREFIX
from sidecars.slurm import Node, NodeState
from sidecars.slurm.models import Reason
from tests.configsync.harness import read_set

LINES = (
    "NodeName=n[1-2] Feature=gpu CPUs=1\nNodeName=x1 State=DOWN Reason=not_provisioned\n"
    "NodeName=x2 State=DRAIN Reason=not_provisioned\n"
)


RECORD: dict[str, object] = {"slurmd_start_time": None, "features": (), "active_features": ()}


def conf(extra: str = "") -> SlurmConf:
    text = f"ClusterName=c\nSlurmctldHost=vm\n{LINES}{extra}"
    return conffile.parse(read_set({"slurm.conf": text.encode()}), "slurm.conf", Path("/etc/slurm"))


def node(name: str, state: str = "IDLE", reason: str | None = None, **fields: object) -> Node:
    base = Node(
        name=name,
        state=NodeState.parse(state),
        reason=Reason(reason, "root", 1) if reason else None,
        cpus=1,
        alloc_cpus=0,
        real_memory=1000,
        features=("gpu",),
        active_features=("gpu",),
        gres="",
        gres_used="",
        address="",
        hostname="",
        partitions=("debug",),
        boot_time=1,
        slurmd_start_time=1,
        version="26.05.5",
        weight=1,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def test_only_run_time_values_are_held() -> None:
    nodes = {
        "n1": node("n1", features=("gpu", "rt"), active_features=("rt",), weight=77),
        "n2": node("n2"),  # as the files say: nothing to keep
    }
    assert hold(nodes, conf(), conf()) == {
        "n1": Held(features=(("gpu", "rt"), ("rt",)), weight=77),
    }


def test_what_the_change_sets_is_the_change_s() -> None:
    nodes = {"n1": node("n1", features=("gpu", "rt"), active_features=("rt",), weight=77)}
    new = conffile.parse(
        read_set({"slurm.conf": b"ClusterName=c\nSlurmctldHost=vm\nNodeName=n[1-2] Feature=gpu Weight=5\n"}),
        "slurm.conf",
        Path("/etc/slurm"),
    )
    assert hold(nodes, conf(), new) == {"n1": Held(features=(("gpu", "rt"), ("rt",)))}


def test_whose_down_and_drain_are_held() -> None:
    nodes = {
        "n1": node("n1", "DOWN", "admin: repair"),
        "n2": node("n2", "IDLE+DRAIN", f"{REASON_PREFIX} gpu check failed"),
        # Slurm's own reason: Slurm's to lift, never held
        "n3": node("n3", "DOWN*", "Not responding"),
        # a record the files hold DOWN, whose slurmd never registered: nothing will return it
        "x1": node("x1", "DOWN", "not_provisioned", **RECORD),
        # a record the files drain: every reconfigure drains it again
        "x2": node("x2", "IDLE+DRAIN", "not_provisioned", **RECORD),
    }
    held = hold(nodes, conf(), conf())
    assert held == {
        "n1": Held(down="admin: repair"),
        "n2": Held(drain=f"{REASON_PREFIX} gpu check failed"),
    }, held
    # drains survive every release's reconfigure: the plan does not call them wiped
    assert would_wipe(nodes, conf(), conf()) == {"down": ["n1"]}


def test_a_dynamic_node_keeps_its_available_features() -> None:
    # not in the files (a Slinky worker): its active features become its available ones
    same = node("s1", features=("slinky", "rt"), active_features=("slinky", "rt"))
    differs = node("s2", features=("slinky", "rt"), active_features=("slinky",))
    assert hold({"s1": same, "s2": differs}, conf(), conf()) == {
        "s2": Held(features=(("slinky", "rt"), ("slinky",)))
    }


def test_what_slurm_set_since_is_the_harm_judge_s() -> None:
    held = Held(drain="admin: fan swap")
    # Slurm drained it again for a reason of its own (a registration the change made it refuse)
    harmed = node("n2", "IDLE+DRAIN+INVALID_REG", "gres/gpu count reported lower than configured (0 < 1)")
    assert lost(held, harmed) == []
    assert lost(held, node("n2")) == ["drain"]  # back in service: lost, put back
    down = Held(down="admin: repair")
    assert lost(down, node("n4", "IDLE", "admin: repair")) == ["down"]  # 24.11 keeps the reason
    assert lost(down, node("n4")) == ["down"]  # 26.05 clears it
    assert lost(down, node("n4", "IDLE+DRAIN", "Low RealMemory")) == []
