"""`make kube-play`: the pods of manifests/base run by `podman kube play`, and checked.

No API server can run here, so the rendered manifests (`kubectl kustomize manifests/base`) are
turned into what podman 4.3's `kube play` can run, changing only what it cannot do itself:

- a StatefulSet or Deployment becomes one Pod named as Kubernetes would name it (`slurmctld-0`,
  `slurmd-0`), with the pod's hostname; volumeClaimTemplates become emptyDirs;
- native sidecars (init containers with `restartPolicy: Always`) become ordinary containers, in
  their order: podman runs init containers to completion before the others and has no sidecar
  ordering (startup probes gating the next container). That order is checked statically in
  tests/shipping/test_manifests.py and live by the compose tour, whose depends_on mirrors it;
- `$(POD_NAME)` in a command and the downward API's metadata.name and metadata.namespace are
  filled in as the kubelet would (podman 4.3 expands neither and knows no namespace);
- emptyDirs are fresh empty host directories (podman would seed a volume from the image);
- manifests/base ships no Secret: the ones its pods mount are made here, with random values as
  docs/security.md tells a user to make them, and served as ConfigMaps of the same keys (podman
  4.3.1 crashes on secret volumes);
- the API's projected service-account token is left out (there is no API server to present it
  to), and the agent's own projected token, which nothing here can review, becomes the operator's
  token, as in the demo;
- the Services' names resolve through hostAliases to the controller pod's address;
- probes and the preStop hook are not run by podman (its healthchecks need systemd timers; it has
  no lifecycle hooks): this script runs every exec probe's command in its container until it
  passes, and runs slurmd's preStop command itself while a job runs, checking that the job
  completes and the node ends drained.

Also checked in the real containers: every sidecar runs as uid 401 with no capabilities and cannot
write its root filesystem. Everything is removed at the end (pods, network), on every path.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import yaml
from _steps import StepFailed, run, say, until

ROOT = Path(__file__).resolve().parents[1]
Obj = dict[str, Any]
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


def render(kubectl: str) -> list[Obj]:
    out = run(kubectl, "kustomize", str(ROOT / "manifests" / "base")).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def podman_pod(obj: Obj, name: str, tag: str, prefix: str, empty_dirs: Path) -> Obj:
    spec = copy.deepcopy(obj["spec"]["template"]["spec"])
    inits = spec.pop("initContainers", [])
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    # one-shot init containers stay: podman runs them to completion first, as the kubelet does
    if plain := [c for c in inits if c.get("restartPolicy") != "Always"]:
        spec["initContainers"] = plain
    for c in sidecars:
        del c["restartPolicy"]
    spec["containers"] = sidecars + spec["containers"]
    spec["hostname"] = name
    spec["restartPolicy"] = "Always"
    for claim in obj["spec"].get("volumeClaimTemplates", []):
        spec["volumes"].append({"name": claim["metadata"]["name"], "emptyDir": {}})
    # a Kubernetes emptyDir starts empty and world-writable; podman 4.3 makes it a volume seeded
    # from the image's directory, which would hide a manifest that relies on the image's content:
    # each emptyDir is a fresh empty host directory instead
    for v in spec["volumes"]:
        sources = v.get("projected", {}).get("sources", [])
        if any(src.get("serviceAccountToken", {}).get("audience") for src in sources):
            # no API server to review the agent's token: it holds the operator's (the control
            # plane runs without Kubernetes here, as in the demo)
            del v["projected"]
            v["secret"] = {"secretName": "slurm-sidecars-token"}
    projected = {v["name"] for v in spec["volumes"] if "projected" in v}
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in projected]
    for c in spec["containers"] + spec.get("initContainers", []):
        c["volumeMounts"] = [m for m in c.get("volumeMounts", []) if m["name"] not in projected]
    for v in spec["volumes"]:
        if "emptyDir" in v:
            path = empty_dirs / f"{name}-{v['name']}"
            path.mkdir()
            path.chmod(0o777)
            del v["emptyDir"]
            v["hostPath"] = {"path": str(path), "type": "Directory"}
        if "secret" in v:
            v["configMap"] = {"name": v.pop("secret")["secretName"]}
    for c in spec["containers"] + spec.get("initContainers", []):
        image, _, _ = c["image"].partition(":")
        c["image"] = f"localhost/{prefix}/{image.split('/')[-1]}:{tag}"
        c["imagePullPolicy"] = "Never"
        # the downward API as the kubelet fills it (podman 4.3 knows no metadata.namespace, and its
        # pod names carry this run's id)
        for env in c.get("env", []):
            path = env.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            if path in {"metadata.name", "metadata.namespace"}:
                del env["valueFrom"]
                env["value"] = (
                    name if path == "metadata.name" else obj["metadata"].get("namespace", "default")
                )
        for key in ("command", "args"):
            if key in c:
                c[key] = [w.replace("$(POD_NAME)", name) for w in c[key]]
    # podman 4.3 fails removing a run-"once" init container (it removes them after the run): keep it
    meta = {"name": name, "annotations": {"io.podman.annotations.init.container.type": "always"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


# the Secrets the pods mount, generated as docs/security.md says (the munge key as hex: a
# ConfigMap holds text)
GENERATED_SECRETS = {
    "slurm-auth": {"munge.key": lambda: secrets.token_hex(512)},
    "slurm-sidecars-token": {"token": lambda: secrets.token_hex(32)},
    "slurm-sidecars-viewer": {"token": lambda: secrets.token_hex(32)},
}


def secret_as_configmap(name: str) -> Obj:
    if name not in GENERATED_SECRETS:
        raise StepFailed(f"a pod mounts Secret {name!r}, which this script does not know how to make")
    data = {key: make() for key, make in GENERATED_SECRETS[name].items()}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


class Play:
    def __init__(self, kubectl: str, tag: str, prefix: str) -> None:
        self.run_id = uuid.uuid4().hex[:8]
        self.network = f"sidecars-kube-{self.run_id}"
        self.dir = Path(tempfile.mkdtemp(prefix="sidecars-kube-"))
        objs = render(kubectl)
        self.manifests = objs
        self.configmaps = [o for o in objs if o["kind"] == "ConfigMap"]
        sts = next(o for o in objs if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "slurmctld")
        dep = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "slurmd")
        mounted = {
            v["secret"]["secretName"]
            for o in (sts, dep)
            for v in o["spec"]["template"]["spec"]["volumes"]
            if "secret" in v
        }
        self.configmaps += [secret_as_configmap(name) for name in sorted(mounted)]
        # unique pod names per run: a test and a manual run never meet; hostnames stay Kubernetes'
        self.pods = {
            "slurmctld": podman_pod(sts, "slurmctld-0", tag, prefix, self.dir),
            "slurmd": podman_pod(dep, "slurmd-0", tag, prefix, self.dir),
        }
        for pod in self.pods.values():
            pod["metadata"]["name"] = f"{pod['spec']['hostname']}-{self.run_id}"
            # podman keeps a ConfigMap as a volume of its name: one per run, removed at the end
            for v in pod["spec"]["volumes"]:
                if "configMap" in v:
                    v["configMap"]["name"] += f"-{self.run_id}"
        for cm in self.configmaps:
            cm["metadata"]["name"] += f"-{self.run_id}"
        self.played: list[Path] = []

    def container(self, role: str, name: str) -> str:
        return f"{self.pods[role]['metadata']['name']}-{name}"

    def play(self, role: str) -> None:
        path = self.dir / f"{role}.yaml"
        path.write_text(yaml.safe_dump_all([*self.configmaps, self.pods[role]]))
        self.played.append(path)
        run("podman", "kube", "play", "--network", self.network, str(path))

    def address(self, role: str) -> str:
        info = json.loads(run("podman", "pod", "inspect", self.pods[role]["metadata"]["name"]).stdout)
        infra = info["InfraContainerID"] if isinstance(info, dict) else info[0]["InfraContainerID"]
        nets = json.loads(run("podman", "inspect", infra).stdout)[0]["NetworkSettings"]["Networks"]
        address: str = nets[self.network]["IPAddress"]
        return address

    def up(self) -> None:
        run("podman", "network", "create", self.network)
        # the headless Service's name for the controller, from inside its own pod (one netns)
        self.pods["slurmctld"]["spec"]["hostAliases"] = [
            {"ip": "127.0.0.1", "hostnames": ["slurmctld-0.slurmctld"]}
        ]
        self.play("slurmctld")
        ip = self.address("slurmctld")
        self.pods["slurmd"]["spec"]["hostAliases"] = [
            {"ip": ip, "hostnames": ["slurmctld-0.slurmctld", "slurmctld-0", "slurm-sidecars-control-plane"]}
        ]
        self.play("slurmd")

    def down(self) -> list[str]:
        for path in reversed(self.played):
            run("podman", "kube", "down", str(path), check=False)
        for pod in self.pods.values():
            run("podman", "pod", "rm", "-f", pod["metadata"]["name"], check=False)
        run("podman", "network", "rm", "-f", self.network, check=False)
        for cm in self.configmaps:
            run("podman", "volume", "rm", "-f", cm["metadata"]["name"], check=False)
        left_volumes = [
            v
            for v in run("podman", "volume", "ls", "--format", "{{.Name}}").stdout.split()
            if self.run_id in v
        ]
        left = [
            p for p in run("podman", "pod", "ls", "--format", "{{.Name}}").stdout.split() if self.run_id in p
        ]
        left += left_volumes
        left += [
            n
            for n in run("podman", "network", "ls", "--format", "{{.Name}}").stdout.split()
            if n == self.network
        ]
        shutil.rmtree(self.dir, ignore_errors=True)
        return left

    # -------------------------------------------------------------------- checks
    def exec(self, role: str, name: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        # Slurm's commands in the controller's containers read the file config-sync staged
        env = ["--env", "SLURM_CONF=/etc/slurm-sidecars/slurm/slurm.conf"] if role == "slurmctld" else []
        return run("podman", "exec", *env, self.container(role, name), *argv, check=check)

    def check_probes(self, timeout: float) -> list[str]:
        done = []
        for role, pod in self.pods.items():
            for c in pod["spec"]["containers"]:
                for probe in PROBES:
                    argv = c.get(probe, {}).get("exec", {}).get("command")
                    if not argv:
                        continue
                    until(
                        f"{role}/{c['name']} {probe} ({' '.join(argv)})",
                        lambda r=role, n=c["name"], a=argv: self.exec(r, n, *a, check=False).returncode == 0,
                        timeout=timeout,
                        every=1.0,
                    )
                    done.append(f"{role}/{c['name']} {probe}")
        return done

    def check_security(self) -> list[str]:
        done = []
        for role, pod in self.pods.items():
            for c in pod["spec"]["containers"]:
                ctx = c.get("securityContext", {})
                info = json.loads(run("podman", "inspect", self.container(role, c["name"])).stdout)[0]
                if info["State"]["Status"] != "running":
                    raise StepFailed(f"{role}/{c['name']} is {info['State']['Status']}")
                if "runAsUser" in ctx:
                    uid = self.exec(role, c["name"], "id", "-u").stdout.strip()
                    if uid != str(ctx["runAsUser"]):
                        raise StepFailed(f"{role}/{c['name']} runs as uid {uid}, not {ctx['runAsUser']}")
                if ctx.get("readOnlyRootFilesystem"):
                    r = self.exec(role, c["name"], "touch", "/.written", check=False)
                    if r.returncode == 0:
                        raise StepFailed(f"{role}/{c['name']} could write its root filesystem")
                if ctx.get("capabilities", {}).get("drop") == ["ALL"] and not ctx.get("capabilities", {}).get(
                    "add"
                ):
                    status = self.exec(role, c["name"], "cat", "/proc/self/status").stdout
                    eff = re.search(r"CapEff:\s*(\w+)", status)
                    if not eff or int(eff.group(1), 16) != 0:
                        raise StepFailed(f"{role}/{c['name']} has capabilities {eff and eff.group(1)}")
                done.append(f"{role}/{c['name']}")
        return done

    def check_prestop(self) -> str:
        slurmd = next(c for c in self.pods["slurmd"]["spec"]["containers"] if c["name"] == "slurmd")
        hook = slurmd["lifecycle"]["preStop"]["exec"]["command"]
        node = self.pods["slurmd"]["spec"]["hostname"]
        ctld = ("slurmctld",)
        out = self.exec(
            *ctld, "slurmctld", "sbatch", "--parsable", "-o", "/dev/null", "-w", node, "-t", "2",
            "--wrap", "sleep 30",
        ).stdout  # fmt: skip
        job = out.strip().split(";")[0]

        def state() -> str:
            text = self.exec("slurmctld", "slurmctld", "scontrol", "-o", "show", "job", job).stdout
            m = re.search(r"JobState=(\S+)", text)
            return m.group(1) if m else "?"

        # the job outlives many polls: a `podman exec` on a loaded machine takes seconds, and a job
        # of 3 s once ended between two of them (never seen RUNNING)
        until(f"job {job} RUNNING", lambda: state() == "RUNNING", timeout=120, every=1.0)
        r = self.exec("slurmd", "slurmd", *hook, check=False)
        final = until(
            f"job {job} done",
            lambda: s if (s := state()) not in {"RUNNING", "PENDING"} else None,
            timeout=180,
            every=1.0,
        )
        sinfo = self.exec("slurmctld", "slurmctld", "sinfo", "-h", "-n", node, "-o", "%T").stdout.strip()
        # a dynamic node (`slurmd -Z`) is drained, then its record deleted by the agent: gone is right
        # too, but only after the hook said it drained
        drained = sinfo.startswith("drain") or (not sinfo and '"result": "drained"' in r.stdout + r.stderr)
        if r.returncode != 0 or final != "COMPLETED" or not drained:
            raise StepFailed(f"preStop exit {r.returncode}, job {final}, node {sinfo}: {r.stdout}{r.stderr}")
        return f"preStop ({' '.join(hook[:2])}) drained {node} while job {job} ran; the job COMPLETED"


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(143)  # through the `finally` that removes what was made


def main() -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kubectl", default=str(Path(sys.executable).parent / "kubectl"))
    p.add_argument("--tag", default="0.1.0")
    p.add_argument("--prefix", default="slurm-sidecars")
    p.add_argument("--probe-timeout", type=float, default=180.0, help="seconds for each probe to pass")
    args = p.parse_args()
    play = Play(args.kubectl, args.tag, args.prefix)
    ok = False
    try:
        play.up()
        say(f"podman kube play: pods {', '.join(pod['metadata']['name'] for pod in play.pods.values())}")
        probes = play.check_probes(args.probe_timeout)
        say(f"  every exec probe passes in its container ({len(probes)}): {', '.join(probes)}")
        secure = play.check_security()
        say(f"  running, with the manifests' user, read-only root and capabilities: {', '.join(secure)}")
        say(f"  {play.check_prestop()}")
        ok = True
    except StepFailed as exc:
        say(f"FAILED: {exc}")
        for pod in play.pods.values():
            for c in pod["spec"]["containers"]:
                name = f"{pod['metadata']['name']}-{c['name']}"
                logs = run("podman", "logs", "--tail", "5", name, check=False)
                say(f"--- {name}\n{(logs.stdout + logs.stderr).strip()}")
    finally:
        left = play.down()
        if left:
            say(f"left behind: {', '.join(left)}")
            ok = False
        else:
            say("down: no pod or network of this run is left")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
