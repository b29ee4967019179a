"""Finding slurmd in /proc and restarting it by signal (the pod shares its process namespace)."""

from __future__ import annotations

import asyncio
import pwd
import shutil
import tempfile
from pathlib import Path

from sidecars.runtime.waits import within
from sidecars.worker.slurmd import RestartFailed, Slurmd
from tests.helpers import eventually


async def fake_slurmd(tmp_path: Path, conf: str, *args: str) -> asyncio.subprocess.Process:
    """A process whose name is `slurmd` (a copy of sleep), with SLURM_CONF set like a real one."""
    binary = tmp_path / "slurmd"
    shutil.copy("/bin/sleep", binary)
    return await asyncio.create_subprocess_exec(binary, *args, env={"SLURM_CONF": conf})


async def test_signal_restart_of_the_only_slurmd_of_our_cluster(tmp_path: Path) -> None:
    conf = str(tmp_path / "slurm.conf")
    proc = await fake_slurmd(tmp_path, conf, "600")
    try:
        d = Slurmd("w1", env={"SLURM_CONF": conf})
        assert d.find() == proc.pid
        assert d.can_restart
        assert await d.restart() == f"sent SIGTERM to slurmd pid {proc.pid}"
        assert await within(proc.wait(), 5) == -15
        assert d.find() is None and d.ever_seen and d.missing_for() > 0
        # nothing to signal and no command: say so rather than pretend
        try:
            await d.restart()
        except RestartFailed as exc:
            assert "no slurmd process visible" in str(exc)
        else:
            raise AssertionError("restart without a slurmd or a command must fail")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_slurmd_of_another_cluster_is_not_ours(tmp_path: Path) -> None:
    proc = await fake_slurmd(tmp_path, "/elsewhere/slurm.conf", "600")
    try:
        assert Slurmd("w1", env={"SLURM_CONF": str(tmp_path / "slurm.conf")}).find() is None
    finally:
        proc.kill()
        await proc.wait()


async def test_restart_command_output_is_kept_when_it_fails(tmp_path: Path) -> None:
    d = Slurmd(
        "w1",
        restart_command=("sh", "-c", "echo cannot start >&2; exit 4"),
        env={"SLURM_CONF": str(tmp_path / "none.conf"), "PATH": "/usr/bin:/bin"},
    )
    try:
        await d.restart()
    except RestartFailed as exc:
        assert str(exc) == "restart command exited 4: cannot start"
    else:
        raise AssertionError("a failing restart command must raise")


async def test_a_slurmd_run_by_a_job_user_is_not_ours(tmp_path: Path) -> None:
    """A job's user can name a process slurmd and give it our SLURM_CONF: it is never taken for
    slurmd (it would hide slurmd's death from the heal, or pose as a dynamic node)."""
    conf = str(tmp_path / "slurm.conf")
    where = Path(tempfile.mkdtemp(prefix="job-user-"))  # one the user can run from (tmp_path is 0700)
    try:
        where.chmod(0o755)
        binary = where / "slurmd"
        shutil.copy("/bin/sleep", binary)
        nobody = pwd.getpwnam("nobody")
        proc = await asyncio.create_subprocess_exec(
            "setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
            binary, "600", env={"SLURM_CONF": conf},
        )  # fmt: skip
        try:
            ours = Slurmd("w1", env={"SLURM_CONF": conf})
            await eventually(
                lambda: Path(f"/proc/{proc.pid}/comm").read_text().strip(), lambda c: c == "slurmd"
            )
            assert ours.find() is None
            assert ours.can_restart is False
        finally:
            proc.kill()
            await proc.wait()
    finally:
        shutil.rmtree(where)
