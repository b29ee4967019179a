"""The config's author is trusted with the config, never with our processes: a PluginDir inside the
volumes a ConfigMap or Secret fills (or one another user could write) is refused before Slurm's
parser, the dry run or slurmctld could load a shared object that came with the config."""

from __future__ import annotations

import os
from pathlib import Path

from sidecars.configsync.fileset import conffile
from sidecars.configsync.judge.plugintrust import plugin_dir_problems
from sidecars.devcluster import DevCluster
from tests.configsync.harness import config_sync, read_set, set_sha


def conf(text: str) -> conffile.SlurmConf:
    return conffile.parse(read_set({"slurm.conf": text.encode()}), "slurm.conf", Path("/etc/slurm"))


def test_a_plugin_dir_in_the_configs_volumes_or_writable_by_others_is_refused(tmp_path: Path) -> None:
    source, target, ours, open_dir = (tmp_path / n for n in ("source", "target", "plugins", "open"))
    for d in (source / "..data", target, ours, open_dir):
        d.mkdir(parents=True)
    open_dir.chmod(0o777)  # a job's user could plant a plugin here
    filled = [source, target]
    assert plugin_dir_problems(conf("ClusterName=c\n"), filled) == []
    assert plugin_dir_problems(conf(f"PluginDir={ours}\n"), filled) == []
    for inside in (source, source / "..data", target / "sub", Path(f"{source}/x/../..data")):
        (problem,) = plugin_dir_problems(conf(f"PluginDir={ours}:{inside}\n"), filled)
        assert f"{inside} lies in " in problem and "never loaded from there" in problem, problem
    (problem,) = plugin_dir_problems(conf(f"PluginDir={open_dir}\n"), filled)
    assert "trust" in problem
    # a link into the volumes is followed
    link = tmp_path / "link"
    os.symlink(source, link)
    (problem,) = plugin_dir_problems(conf(f"PluginDir={link}\n"), filled)
    assert "lies in" in problem


async def test_a_plugin_shipped_in_a_secret_is_never_loaded(cluster: DevCluster) -> None:
    async with config_sync(cluster) as sync:
        good = sync.target_sha()
        files = sync.good()
        files["slurm.conf"] += f"PluginDir={sync.secrets.path}\n".encode()
        sync.config.write(files)
        st = await sync.wait(set_sha(files), key="rejected")
        assert "never loaded from there" in st["rejected"]["reason"], st
        assert sync.target_sha() == good
        assert await sync.metric("slurm_sidecars_slurm_commands_total", command="scontrol reconfigure") == 0
        assert (await cluster.client().ping()).up
