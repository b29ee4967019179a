"""Every Slurm command we run loads plugins only from a directory root owns: a `PluginDir=` into a
ConfigMap's or Secret's volume (a binaryData plugin) or into a directory another user could write is
refused at the Slurm edge before any Slurm program starts, with a one-line reason.

The real `scontrol` shows why: it loads its plugins from the PluginDir the file names (with the
image's plugins linked there it works; with that directory empty it cannot even authenticate)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sidecars.devcluster import DevCluster
from sidecars.runtime import process
from sidecars.slurm import SlurmClient, SlurmCommandError, SlurmMetrics
from sidecars.slurm.plugindir import refusal


def kubelet_volume(root: Path) -> Path:
    """A directory laid out as the kubelet fills a ConfigMap volume whose items put files under
    `plugins/`: `..<stamp>/plugins/`, `..data` -> `..<stamp>`, `plugins` -> `..data/plugins`."""
    stamp = root / "..2026_12_06_04_00_00.000000001"
    (stamp / "plugins").mkdir(parents=True)
    os.symlink(stamp.name, root / "..data")
    os.symlink("..data/plugins", root / "plugins")
    return root / "plugins"


def planted(cluster: DevCluster, plugin_dir: Path) -> dict[str, str]:
    """The cluster's own slurm.conf with a PluginDir line added, as the environment of a client."""
    conf = cluster.conf_path.parent / "planted.conf"
    conf.write_text(cluster.conf_path.read_text() + f"PluginDir={plugin_dir}\n")
    return {**cluster.env, "SLURM_CONF": str(conf)}


async def scontrol_directly(env: dict[str, str]) -> process.Done:
    """`scontrol ping` without the edge: what Slurm itself does with the file."""
    return await process.run(["scontrol", "ping"], env=env, timeout=60)


@pytest.mark.per_release("each release's scontrol reads PluginDir its own way")
async def test_a_plugin_dir_in_a_configmap_volume_is_read_by_scontrol_and_refused_by_us(
    cluster: DevCluster,
) -> None:
    volume = cluster.conf_path.parent / "slurm-config"  # where the release's scontrol sees it too
    plugins = kubelet_volume(volume)
    env = planted(cluster, plugins)
    # Slurm loads its plugins from there: an empty directory and it cannot even authenticate ...
    empty = await scontrol_directly(env)
    assert empty.returncode != 0 and b"plugin" in empty.stderr.lower(), empty
    # ... the image's plugins linked in, and it works: whatever lies there is what runs
    # (linked by the path the release's own scontrol sees them at: in its chroot, if it has one)
    seen_there = Path((await cluster.client().show_config())["PluginDir"].split(":")[0])
    for so in (await cluster.plugin_dir()).iterdir():
        os.symlink(seen_there / so.name, plugins / so.name)
    loaded = await scontrol_directly(env)
    assert loaded.returncode == 0 and b"UP" in loaded.stdout, loaded

    registry = CollectorRegistry()
    client = SlurmClient(env=env, metrics=SlurmMetrics(registry))
    with pytest.raises(SlurmCommandError) as refused:
        await client.run("scontrol", "ping")
    message = refused.value.message
    assert message.startswith("refused before running: PluginDir=") and "\n" not in message, message
    assert "a ConfigMap or Secret fills" in message and str(volume) in message
    assert (
        registry.get_sample_value(
            "slurm_sidecars_slurm_commands_total", {"command": "scontrol ping", "result": "refused"}
        )
        == 1
    )
    for result in ("ok", "error", "unreachable"):
        assert (
            registry.get_sample_value(
                "slurm_sidecars_slurm_commands_total", {"command": "scontrol ping", "result": result}
            )
            is None
        )
    # the same file without the line: the command runs
    assert (await SlurmClient(env=cluster.env).ping()).up


def test_plugin_dirs_another_user_could_fill_are_refused(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    env = {"SLURM_CONF": str(conf)}
    ours = tmp_path / "lib" / "slurm"
    ours.mkdir(parents=True)
    tmp_path.chmod(0o755)
    conf.write_text(f"ClusterName=c\nPluginDir={ours}\n")
    assert refusal(["scontrol", "ping"], env) is None
    conf.write_text("ClusterName=c\n")  # none: the compiled-in one (the image's)
    assert refusal(["scontrol", "ping"], env) is None

    # owned by another uid
    other = tmp_path / "other"
    other.mkdir()
    os.chown(other, 65534, 65534)
    conf.write_text(f"PluginDir={ours}:{other}\n")
    why = refusal(["scontrol", "ping"], env)
    assert why is not None and "owned by uid 65534" in why and "\n" not in why, why
    # writable by everyone
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    conf.write_text(f"PluginDir={open_dir}\n")
    why = refusal(["sacctmgr", "ping"], env)
    assert why is not None and "writable by every user" in why, why
    # a Secret volume's own files (the kubelet's `..data` is beside them), set in an Include
    secret = tmp_path / "secret"
    (secret / "..2026_1").mkdir(parents=True)
    os.symlink("..2026_1", secret / "..data")
    (tmp_path / "more.conf").write_text(f"PluginDir={secret}\n")
    conf.write_text("ClusterName=c\nInclude more.conf\n")
    why = refusal(["scontrol", "show", "config"], env)
    assert why is not None and "a ConfigMap or Secret fills" in why and "more.conf" in why, why
    # slurmdbd reads slurmdbd.conf beside slurm.conf: its PluginDir is checked too
    conf.write_text("ClusterName=c\n")
    (tmp_path / "slurmdbd.conf").write_text(f"PluginDir={secret}/..data\n")
    assert refusal(["scontrol", "ping"], env) is None
    why = refusal(["slurmdbd", "-D"], env)
    assert why is not None and "slurmdbd.conf" in why, why
    # what is not a Slurm program is not asked about; a file we cannot bound is refused
    conf.write_bytes(b"#" * (16 * 1024 * 1024 + 1))
    why = refusal(["scontrol", "ping"], env)
    assert why is not None and "over" in why, why
