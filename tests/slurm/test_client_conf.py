"""The client slurm.conf a sidecar outside slurmctld's pod reads is rendered by us: the controllers,
auth and accounting host, never a PluginDir or anything else that chooses code; the real commands of
every release reach the controller with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.cli import self_argv
from sidecars.devcluster import DevCluster
from sidecars.runtime import process
from sidecars.slurm import SlurmClient
from sidecars.slurm.clientconf import ClientConfError, render
from tests.slurm.test_plugin_dir_refused import kubelet_volume


@pytest.mark.per_release("each release's commands read the rendered client file")
async def test_the_rendered_file_reaches_the_controller_and_names_no_plugin_dir(cluster: DevCluster) -> None:
    volume = cluster.conf_path.parent / "slurm-config"
    plugins = kubelet_volume(volume)
    raw = cluster.conf_path.parent / "raw.conf"
    raw.write_text(cluster.conf_path.read_text() + f"PluginDir={plugins}\nProlog=/bin/evil\n")
    out = cluster.conf_path.parent / "client.conf"
    # as the init step runs it: the installed command
    done = await process.run(self_argv("client-conf", "--from", str(raw), "--out", str(out)), timeout=60)
    assert done.returncode == 0, done
    text = out.read_text()
    assert "PluginDir" not in text and "Prolog" not in text and "NodeName" not in text, text
    assert "SlurmctldHost=" in text and "AuthType=" in text, text
    client = SlurmClient(env={**cluster.env, "SLURM_CONF": str(out)})
    assert (await client.ping()).up
    assert (await client.show_config())["ClusterName"] == (await cluster.client().show_config())[
        "ClusterName"
    ]
    assert {n.name for n in await client.nodes()} == {n.name for n in await cluster.client().nodes()}


def test_what_is_kept_and_what_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    (tmp_path / "more.conf").write_text("SlurmctldHost=ctl-1(10.0.0.2)\nAccountingStorageHost=dbd-0.dbd\n")
    conf.write_text(
        "ClusterName=c PluginDir=/mnt/cm\n"
        "SlurmctldHost=ctl-0\n"
        "include more.conf\n"
        "AuthType=auth/munge\nAuthInfo=socket=/run/munge/munge.socket.2\n"
        "NodeName=n[1-4] Port=6818 ClusterName=other\n"
        "Prolog=/bin/true  # a comment\n"
    )
    r = render(conf)
    body = [ln for ln in r.text.splitlines() if not ln.startswith("#")]
    assert body == [
        "ClusterName=c",
        "SlurmctldHost=ctl-0",
        "SlurmctldHost=ctl-1(10.0.0.2)",
        "AuthType=auth/munge",
        "AuthInfo=socket=/run/munge/munge.socket.2",
        "AccountingStorageHost=dbd-0.dbd",
    ]
    assert r.dropped == 3  # PluginDir, the NodeName line, Prolog
    for text, said in (
        ("ClusterName=c\n", "names no controller"),
        ("SlurmctldHost=a\ninclude /etc/other.conf\n", "only a file beside it"),
        ("SlurmctldHost=a\ninclude *.conf\n", "only a file beside it"),
        ("SlurmctldHost=a\nAuthInfo=\x01secret\n", "AuthInfo: not one printable word"),
        ("SlurmctldHost=a\ninclude missing.conf\n", "cannot be read"),
    ):
        conf.write_text(text)
        with pytest.raises(ClientConfError) as refused:
            render(conf)
        assert said in str(refused.value) and "secret" not in str(refused.value), (text, refused.value)
    conf.write_text("SlurmctldHost=a\ninclude slurm.conf\n")  # itself, forever: bounded
    with pytest.raises(ClientConfError, match="included files"):
        render(conf)
