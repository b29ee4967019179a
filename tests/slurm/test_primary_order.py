"""The copy of slurm.conf that sends commands to the controller in control first: only the order of
the `SlurmctldHost` lines changes; everything beside the file is reached as from the real one; one
controller, or one not named, changes nothing; a new file gives a new copy; nothing is left."""

from __future__ import annotations

from pathlib import Path

from sidecars.slurm import Controllers
from sidecars.slurm.primary import first

CONF = """\
ClusterName=c
SlurmctldHost=ctld-a(198.18.0.2)
SlurmctldHost=ctld-b(198.18.0.6)
  slurmctldhost = ctld-c
Include nodes.conf
PartitionName=debug Nodes=ALL
"""


def _hosts(text: str) -> list[str]:
    return [ln.strip().split("=", 1)[1].strip() for ln in text.splitlines() if "ctldhost" in ln.lower()]


def test_the_one_in_control_comes_first_and_nothing_else_moves() -> None:
    moved = first(CONF, "ctld-b")
    assert _hosts(moved) == ["ctld-b(198.18.0.6)", "ctld-a(198.18.0.2)", "ctld-c"]
    assert [ln for ln in moved.splitlines() if "ctldhost" not in ln.lower()] == [
        ln for ln in CONF.splitlines() if "ctldhost" not in ln.lower()
    ]
    assert _hosts(first(CONF, "ctld-c")) == ["ctld-c", "ctld-a(198.18.0.2)", "ctld-b(198.18.0.6)"]
    assert first(CONF, "ctld-a") == CONF
    assert first(CONF, "ctld-z") == CONF  # not a controller of this file: as it is


def _controllers(tmp_path: Path, text: str) -> tuple[Controllers, dict[str, str]]:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text(text)
    (etc / "nodes.conf").write_text("NodeName=n1\n")
    env = {"SLURM_CONF": str(etc / "slurm.conf"), "TMPDIR": str(tmp_path)}
    return Controllers(env), env


def test_commands_read_a_copy_naming_the_primary_first(tmp_path: Path) -> None:
    ctl, env = _controllers(tmp_path, CONF)
    assert ctl.hosts() == ["ctld-a", "ctld-b", "ctld-c"]
    assert ctl.env(env) is env  # nothing learnt yet: the real file
    ctl.primary = "ctld-a"
    assert ctl.env(env) is env  # first already
    ctl.primary = "ctld-b"
    copy = Path(ctl.env(env)["SLURM_CONF"])  # type: ignore[index]
    assert copy != Path(env["SLURM_CONF"])
    assert _hosts(copy.read_text())[0] == "ctld-b(198.18.0.6)"
    assert (copy.parent / "nodes.conf").read_text() == "NodeName=n1\n"  # includes resolve
    assert oct(copy.parent.parent.stat().st_mode & 0o777) == "0o700"  # private
    assert Path(ctl.env(env)["SLURM_CONF"]) == copy  # kept while the file is the same  # type: ignore[index]

    # the real file changed (config-sync staged a new set): a new copy, the old one removed
    (tmp_path / "etc" / "slurm.conf").write_text(CONF.replace("ClusterName=c", "ClusterName=d"))
    fresh = Path(ctl.env(env)["SLURM_CONF"])  # type: ignore[index]
    assert fresh != copy and not copy.exists()
    assert "ClusterName=d" in fresh.read_text()
    ctl.close()
    assert not fresh.exists() and not any(tmp_path.glob("slurm-sidecars-order-*"))


def test_one_controller_or_no_file_changes_nothing(tmp_path: Path) -> None:
    ctl, env = _controllers(tmp_path, "SlurmctldHost=only\n")
    ctl.primary = "only"
    assert ctl.env(env) is env and not ctl.due()
    gone = Controllers({"SLURM_CONF": str(tmp_path / "none.conf")})
    assert gone.hosts() == [] and not gone.due()
