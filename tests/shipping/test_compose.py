"""docker-compose.yml: valid against the Compose specification's schema, and everything it names
(images, commands, flags, probes) exists. No engine runs here, so nothing is started."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.shipping.shipped import ROOT, all_commands, env_flag, known_flags

Obj = dict[str, Any]


def _compose() -> Obj:
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(doc, dict)
    return doc


def _schema() -> Obj:
    # the Compose specification's own schema, as check-jsonschema vendors it
    text = files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text()
    schema = json.loads(text)
    assert isinstance(schema, dict)
    return schema


def _errors(doc: Obj) -> list[str]:
    schema = _schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_validates_against_the_compose_schema() -> None:
    assert _errors(_compose()) == []


def test_schema_check_is_not_a_no_op() -> None:
    doc = copy.deepcopy(_compose())
    doc["services"]["slurmctld"]["helthcheck"] = doc["services"]["slurmctld"].pop("healthcheck")
    doc["services"]["config-sync"]["depends_on"]["kubelet"]["condition"] = "when_ready"
    errors = _errors(doc)
    assert any("helthcheck" in e for e in errors) and any("when_ready" in e for e in errors), errors


def test_every_image_is_built_from_images() -> None:
    services = _compose()["services"]
    built = {}
    for name, svc in services.items():
        if "build" in svc:
            dockerfile = ROOT / svc["build"]["context"] / svc["build"]["dockerfile"]
            assert dockerfile.is_file() and dockerfile.parent == ROOT / "images", name
            assert svc["build"]["context"] == "."
            built[svc["image"]] = dockerfile
    assert set(built.values()) == set((ROOT / "images").glob("*.Dockerfile"))
    for name, svc in services.items():
        assert svc["image"] in built, f"{name}: {svc['image']} is built by no service"
        assert svc.get("pull_policy") == "never", f"{name}: would try to pull a locally built image"
        role = re.fullmatch(r"slurm-sidecars/(\w+):[\w.]+", svc["image"])
        assert role and built[svc["image"]].name == f"{role.group(1)}.Dockerfile"


def _argvs(svc: Obj) -> list[tuple[str, list[str]]]:
    out = []
    if isinstance(svc.get("command"), list):
        out.append(("command", svc["command"]))
    test = svc.get("healthcheck", {}).get("test")
    if isinstance(test, list) and test[:1] == ["CMD"]:
        out.append(("healthcheck", test[1:]))
    return out


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_commands_and_flags_exist() -> None:
    seen = set()
    for name, svc in _compose()["services"].items():
        for what, argv in _argvs(svc):
            if argv[:1] != ["slurm-sidecars"]:
                continue
            sub, words = argv[1], argv[2:]
            assert sub in all_commands(), f"{name} {what}: no subcommand {sub}"
            if sub == "probe":
                assert words[0] in {"livez", "readyz"}
                words = words[1:]
            flags = [w for w in words if w.startswith("--")]
            assert set(flags) <= known_flags(sub), f"{name} {what}: {set(flags) - known_flags(sub)}"
            assert len(words) == 2 * len(flags), f"{name} {what}: every flag takes one value"
            if what == "command":
                for var in svc.get("environment", {}):
                    as_flag = env_flag(var)
                    assert as_flag is None or as_flag in known_flags(sub), (
                        f"{name}: {var} is no flag of {sub}"
                    )
            seen.add(sub)
    assert {"config-sync", "control-plane", "worker", "probe", "status"} <= seen


def test_healthchecks_go_through_the_probes() -> None:
    services = _compose()["services"]
    daemons = {
        n: s
        for n, s in services.items()
        if s.get("command", [None])[0] == "slurm-sidecars" and s["command"][1] != "status"
    }
    assert len(daemons) == 4  # config-sync, control plane, two agents
    for name, svc in daemons.items():
        test = svc["healthcheck"]["test"]
        assert test[1:3] == ["slurm-sidecars", "probe"], name
        assert _flag(test, "--url") == f"http://127.0.0.1:{_flag(svc['command'], '--http').rsplit(':', 1)[1]}"
        assert svc["user"] == "401:401", f"{name}: sidecars run as the SlurmUser, not root"
    workers = {n: s for n, s in services.items() if s.get("command", [None])[0] == "slurmd"}
    assert sorted(workers) == ["worker-1", "worker-2"]
    for name, svc in workers.items():
        agent = name.replace("worker", "agent")
        node = _flag(svc["command"], "-N")
        assert _flag(services[agent]["command"], "--node-name") == node == svc["hostname"]
        assert svc["healthcheck"]["test"][1:4] == ["slurm-sidecars", "probe", "readyz"]
        assert _flag(svc["healthcheck"]["test"], "--url") == f"http://{agent}:9300"
        # the agent starts first and shares the drain-hook socket's volume with slurmd
        assert svc["depends_on"][agent]["condition"] == "service_healthy"
        socket_dir = os.path.dirname(_flag(services[agent]["command"], "--socket") or "")
        vol = next(v.split(":")[0] for v in services[agent]["volumes"] if v.split(":")[1] == socket_dir)
        # read-only where jobs run: the hook only connects to the agent's socket
        assert f"{vol}:{socket_dir}:ro" in svc["volumes"]
    assert services["slurmctld"]["depends_on"]["config-sync"]["condition"] == "service_healthy"


def test_the_kubelet_service_lays_out_a_configmap_volume(tmp_path: Path) -> None:
    """Run the `kubelet` service's script here (paths moved into a temp dir): it leaves the layout
    the kubelet leaves, and a second run swaps `..data` and removes the old copy."""
    svc = _compose()["services"]["kubelet"]
    script = svc["command"][2].replace("$$", "$")
    seed, configmap = tmp_path / "seed", tmp_path / "configmap"
    seed.mkdir()
    configmap.mkdir()
    script = script.replace("/configmap", str(configmap)).replace("/seed", str(seed))
    content = (ROOT / "images" / "compose" / "slurm.conf").read_text()
    (seed / "slurm.conf").write_text(content)
    subprocess.run(["sh", "-c", script], check=True)
    first = os.readlink(configmap / "..data")
    assert (configmap / "slurm.conf").read_text() == content
    assert os.readlink(configmap / "slurm.conf") == "..data/slurm.conf"
    (seed / "slurm.conf").write_text(content + "# changed\n")
    subprocess.run(["sh", "-c", script], check=True)
    second = os.readlink(configmap / "..data")
    assert second != first and not (configmap / first).exists()
    assert (configmap / "slurm.conf").read_text().endswith("# changed\n")
    assert sorted(p.name for p in configmap.iterdir()) == sorted(["..data", "slurm.conf", second])


@pytest.mark.parametrize("key", ["SlurmctldHost", "SlurmctldParameters", "AuthType"])
def test_compose_slurm_conf_matches_the_services(key: str) -> None:
    doc = _compose()
    seed = (ROOT / "images" / "compose" / "slurm.conf").read_text()
    conf = dict(line.split("=", 1) for line in seed.splitlines() if "=" in line)
    expected = {
        "SlurmctldHost": doc["services"]["slurmctld"]["hostname"],
        "SlurmctldParameters": "enable_configless",
        "AuthType": "auth/munge",
    }
    assert conf[key] == expected[key]
