"""The daemon as users run it: flags and environment, exit codes, its HTTP face, and restarts of the
sidecar itself (the last known good set survives them)."""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

import pytest

from sidecars.cli import self_argv
from sidecars.configsync import settings as settings_mod
from sidecars.devcluster import DevCluster
from sidecars.devcluster.volume import AtomicVolume
from sidecars.runtime.settings import ConfigError
from sidecars.runtime.waits import within
from tests.configsync.harness import cluster_files, config_sync, read_set, set_sha, start_command


def test_bad_invocations_are_config_errors(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "etc").mkdir()
    base = ["--source", str(tmp_path / "src"), "--target", str(tmp_path / "etc")]
    bad = [
        [*base, "--http", "nonsense"],
        [*base, "--http", "127.0.0.1:0", "--debounce-seconds", "-1"],
        ["--source", str(tmp_path / "nope"), "--target", str(tmp_path / "etc"), "--http", "127.0.0.1:0"],
        [*base[:2], "--target", str(tmp_path / "src"), "--http", "127.0.0.1:0"],
        [*base, "--http", "127.0.0.1:0", "--state-dir", str(tmp_path / "etc" / "state")],
        [*base[:2], "--target", str(tmp_path / "no" / "such"), "--http", "127.0.0.1:0"],
        [*base[:2], "--target", str(tmp_path / "file"), "--http", "127.0.0.1:0"],
    ]
    (tmp_path / "file").write_text("not a directory")
    for argv in bad:
        p = argparse.ArgumentParser()
        settings_mod.configure(p)
        with pytest.raises(ConfigError):
            settings_mod.from_args(p.parse_args(argv))
    # a target not made yet under an existing directory (an emptyDir) is fine: config-sync makes it
    p = argparse.ArgumentParser()
    settings_mod.configure(p)
    fresh = tmp_path / "etc" / "slurm"
    args = p.parse_args([*base[:2], "--target", str(fresh), "--http", "127.0.0.1:0"])
    assert settings_mod.from_args(args).target == fresh


async def test_a_bad_invocation_exits_2_with_a_reason(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        *self_argv(
            "config-sync",
            "--source",
            str(tmp_path / "nope"),
            "--target",
            str(tmp_path),
            "--http",
            "127.0.0.1:0",
        ),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert b"is not a directory" in err


def test_every_flag_comes_from_the_environment_too(tmp_path: Path, monkeypatch: object) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "etc").mkdir()
    env = {
        "SIDECARS_SOURCE": f"{tmp_path}/a,{tmp_path}/b",
        "SIDECARS_TARGET": f"{tmp_path}/etc",
        "SIDECARS_HTTP": "127.0.0.1:9999",
        "SIDECARS_SETTLE_SECONDS": "0.5",
        "SIDECARS_RESTART_POLICY": "restart",
        "SIDECARS_STATE_DIR": f"{tmp_path}/state",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)  # type: ignore[attr-defined]
    p = argparse.ArgumentParser()
    settings_mod.configure(p)
    s = settings_mod.from_args(p.parse_args([]))
    assert s.sources == (tmp_path / "a", tmp_path / "b") and s.http_address[1] == 9999
    assert s.settle_seconds == 0.5 and s.restart_policy == "restart" and s.state_dir == tmp_path / "state"


async def applied_then_ended_mid_swap(
    cluster: DevCluster, max_time: bytes, generation: int, *, marked: bool
) -> dict[str, bytes]:
    """config-sync applies a change (MaxTime=`max_time`), then ends between a swap of another set
    (as `generation`, `marked` unverified or not) and its verification: that set is on disk. The
    applied set, returned, is the last known good."""
    async with config_sync(cluster) as sync:
        files = sync.good()
        files["slurm.conf"] = files["slurm.conf"].replace(b"MaxTime=INFINITE", b"MaxTime=" + max_time)
        sync.config.write(files)
        await sync.wait(set_sha(files))
        unverified = {**files, "slurm.conf": files["slurm.conf"] + b"# never verified\n"}
        sync.service.target.swap(read_set(unverified), generation, unverified=marked)
    return files


@pytest.mark.releases("slurm26")  # the state dir is ours, not Slurm's: one release shows it
async def test_sidecar_restart_keeps_the_last_known_good(cluster: DevCluster) -> None:
    files = await applied_then_ended_mid_swap(cluster, b"41", 99, marked=False)
    async with config_sync(cluster, initial=files) as again:
        st = await again.status()
        assert st["applied"] == {**st["applied"], "generation": 2, "sha256": set_sha(files)}
        assert again.target_sha() == set_sha(files) and st["pending"] is False


@pytest.mark.parametrize("guard_ran", [True, False])
@pytest.mark.releases("slurm22")  # the state dir and config-guard are ours: one release shows it
async def test_a_set_left_unverified_while_the_sidecar_was_down_is_reported(
    cluster: DevCluster, guard_ran: bool
) -> None:
    """config-sync ends mid-verification, the set on disk stays marked unverified. Either slurmctld
    restarts through config-guard before config-sync is back, or it does not; either way the good
    set is back when config-sync is ready, and /status says who put it back."""
    files = await applied_then_ended_mid_swap(cluster, b"43", 3, marked=True)
    target = str(cluster.conf_path.parent)
    if guard_ran:
        guard = await asyncio.create_subprocess_exec(*self_argv("config-guard", "--target", target))
        assert await within(guard.wait(), 60) == 0
    async with config_sync(cluster, initial=files) as again:
        st = await again.status()
        assert again.target_sha() == set_sha(files) and st["applied"]["generation"] == 2
        assert st["restored"] is not None, st
        assert st["restored"]["by"] == ("config-guard" if guard_ran else "config-sync")
        assert (st["restored"]["restored_generation"], st["restored"]["unverified_generation"]) == (2, 3)
        assert any(r == "ConfigRestored" for r, _, _ in again.events.events)


@pytest.mark.releases("slurm24")  # the process and its HTTP face are ours: one release shows it
async def test_the_command_serves_status_and_exits_0_on_sigterm(cluster: DevCluster) -> None:
    vol = AtomicVolume(cluster.dir / "vol" / "cm")
    vol.write(cluster_files(cluster))
    cmd = await start_command(
        cluster, vol, "--settle-seconds", "0", env={"SIDECARS_STATE_DIR": str(cluster.dir / "cs-state")}
    )
    try:
        st = await cmd.get("/status")
        metrics = await cmd.get("/metrics")
        keys = {"applied", "rejected", "restart_required", "pending", "held_for_jobs", "dry_run", "workers"}
        keys.add("restored")  # what config-guard (or config-sync at its start) put back, if anything
        keys.add("harm")  # the fleet's health around the last change, and what a rollback undid
        keys.add("node_state")  # run-time node state held across the last reconfigure, and put back
        assert set(st) == keys
        assert set(st["applied"]) == {"generation", "sha256", "at", "forced"}
        assert st["applied"]["generation"] == 1 and st["applied"]["forced"] is None
        assert st["restored"] is None
        assert 'slurm_sidecars_config_applies_total{result="rolled_back"} 0.0' in metrics
    finally:
        cmd.proc.send_signal(signal.SIGTERM)
        _, err = await within(cmd.proc.communicate(), 10)
    assert cmd.proc.returncode == 0, err.decode()[-2000:]
