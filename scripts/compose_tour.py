"""`make compose-tour`: the demo's tour through the compose stack's real containers.

Brings docker-compose.yml up with podman-compose under a project name of its own (so a test and a
manual run never share a container, network or volume), in the order and with the conditions its
`depends_on` says, runs every healthcheck until it passes, then walks the tour with Slurm's
commands inside the containers: jobs on the worker containers, a ConfigMap-style change applied,
a broken one rejected, the scale-in order, a worker drained by its preStop command while its job
completes, the metrics. `down` removes everything of the project, and that nothing is left is
checked. Exit 0 with a summary, 1 when a step failed or something was left behind.

Debian's podman-compose (1.0.3) creates the containers but does not wait on `depends_on`
conditions, and podman 4.3 runs healthchecks from systemd timers, which do not exist in a
container without systemd: so this script waits on the conditions and runs the healthchecks
(`podman healthcheck run`) itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from _steps import StepFailed, run, say, until

from sidecars.demo.narrate import summary
from sidecars.devcluster import free_port

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
SEED = ROOT / "images" / "compose"
# the slurmd pod's preStop hook (manifests/base/slurmd.yaml), with a timeout for a tour
PRESTOP = (
    "slurm-sidecars",
    "drain-hook",
    "--socket",
    "/run/slurm-sidecars/agent.sock",
    "--timeout-seconds",
    "60",
)


class Stack:
    """One compose project: its containers are `<project>_<service>_1`."""

    def __init__(self, project: str, seed: Path) -> None:
        self.project = project
        self.seed = seed
        self.doc: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
        self.env = {
            **os.environ,
            "SLURM_SIDECARS_SEED": str(seed),
            "SIDECARS_CONFIG_SYNC_PORT": str(free_port()),
            "SIDECARS_CONTROL_PLANE_PORT": str(free_port()),
        }

    # ------------------------------------------------------------------ podman
    def compose(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = ["podman-compose", "-p", self.project, "-f", str(COMPOSE_FILE), *args]
        r = run(*argv, check=False, cwd=ROOT, env=self.env)
        if check and r.returncode != 0:
            raise StepFailed(f"podman-compose {' '.join(args)}: exit {r.returncode}: {r.stderr[-2000:]}")
        return r

    def name(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def exec(self, service: str, *argv: str, check: bool = True, user: str | None = None) -> str:
        r = run("podman", "exec", *(["--user", user] if user else []), self.name(service), *argv, check=False)
        if check and r.returncode != 0:
            raise StepFailed(
                f"{service}: {' '.join(argv)}: exit {r.returncode}: {(r.stdout + r.stderr)[-1500:]}"
            )
        return r.stdout

    def inspect(self, service: str) -> dict[str, Any]:
        r = run("podman", "inspect", self.name(service))
        found: list[dict[str, Any]] = json.loads(r.stdout)
        return found[0]

    def healthy(self, service: str) -> bool:
        return run("podman", "healthcheck", "run", self.name(service), check=False).returncode == 0

    def url(self, service: str, port: int) -> str:
        networks = self.inspect(service)["NetworkSettings"]["Networks"]
        return f"http://{next(iter(networks.values()))['IPAddress']}:{port}"

    def get(self, url: str, token: str | None = None) -> Any:
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read().decode()
        return json.loads(body) if resp.headers.get_content_type() == "application/json" else body

    # ------------------------------------------------------------------ up and down
    def services(self) -> list[str]:
        """The services `up` starts (not those behind a profile), dependencies first."""
        services: dict[str, Any] = self.doc["services"]
        order: list[str] = []

        def visit(name: str) -> None:
            if name in order:
                return
            for dep in services[name].get("depends_on", {}):
                visit(dep)
            order.append(name)

        for name, svc in services.items():
            if not svc.get("profiles"):
                visit(name)
        return order

    def up(self, timeout: float = 240.0) -> None:
        services: dict[str, Any] = self.doc["services"]
        self.started = time.monotonic()
        for name in self.services():
            for dep, cond in services[name].get("depends_on", {}).items():
                self.wait_for(dep, cond["condition"], timeout)
            self.compose("up", "-d", "--no-deps", name)
            say(f"  {name} started ({time.monotonic() - self.started:.0f}s)")
        for name in self.services():
            if "healthcheck" in services[name]:
                self.wait_for(name, "service_healthy", timeout)

    def wait_for(self, service: str, condition: str, timeout: float) -> None:
        if condition == "service_completed_successfully":
            r = run("podman", "wait", self.name(service), check=False)
            if r.returncode != 0 or r.stdout.strip() != "0":
                logs = run("podman", "logs", self.name(service), check=False)
                raise StepFailed(f"{service} did not complete successfully: {r.stdout}{logs.stderr[-1000:]}")
        elif condition == "service_healthy":
            try:
                until(f"{service}'s healthcheck", lambda: self.healthy(service), timeout=timeout, every=1.0)
            except StepFailed:
                logs = run("podman", "logs", self.name(service), check=False)
                raise StepFailed(
                    f"{service} never became healthy; its log ends: {(logs.stdout + logs.stderr)[-1500:]}"
                ) from None

    def leftovers(self) -> list[str]:
        label = f"label=io.podman.compose.project={self.project}"
        found = []
        for kind, argv in (
            ("container", ["podman", "ps", "-a", "--filter", label, "--format", "{{.Names}}"]),
            ("volume", ["podman", "volume", "ls", "--filter", label, "--format", "{{.Name}}"]),
            ("network", ["podman", "network", "ls", "--format", "{{.Name}}"]),
        ):
            names = run(*argv, check=False).stdout.split()
            found += [f"{kind} {n}" for n in names if kind != "network" or n.startswith(self.project + "_")]
        return found

    def down(self) -> list[str]:
        """Remove every container, volume and network of the project; return what is left."""
        self.compose("down", "-v", "-t", "20", check=False)
        label = f"label=io.podman.compose.project={self.project}"
        if containers := run("podman", "ps", "-aq", "--filter", label, check=False).stdout.split():
            run("podman", "rm", "-f", "-t", "5", *containers, check=False)
        if volumes := run("podman", "volume", "ls", "-q", "--filter", label, check=False).stdout.split():
            run("podman", "volume", "rm", "-f", *volumes, check=False)
        run("podman", "network", "rm", "-f", f"{self.project}_default", check=False)
        return self.leftovers()


# ---------------------------------------------------------------------------- the tour
class Tour:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.jobs: dict[str, str] = {}
        self.token = stack.exec("control-plane", "cat", "/var/run/secrets/slurm-sidecars/token").strip()
        self.viewer = stack.exec(
            "control-plane", "cat", "/var/run/secrets/slurm-sidecars/viewer-token"
        ).strip()
        self.config_sync = stack.url("config-sync", 9100)
        self.control_plane = stack.url("control-plane", 9200)

    def slurm(self, *argv: str) -> str:
        return self.stack.exec("slurmctld", *argv)

    def sbatch(self, *argv: str) -> str:
        out = self.slurm("sbatch", "--parsable", "-o", "/dev/null", *argv)
        return out.strip().split(";")[0]

    def job_state(self, job: str) -> str:
        out = self.slurm("scontrol", "-o", "show", "job", job)
        m = re.search(r"JobState=(\S+)", out)
        return m.group(1) if m else "UNKNOWN"

    def wait_job(self, job: str, states: set[str], timeout: float = 90.0) -> str:
        return until(
            f"job {job} in {sorted(states)}",
            lambda: s if (s := self.job_state(job)) in states else None,
            timeout=timeout,
        )

    def status(self) -> dict[str, Any]:
        body = self.stack.get(self.config_sync + "/status", self.viewer)  # it shows the config
        assert isinstance(body, dict)
        return body

    def update_configmap(self, text: str) -> None:
        (self.stack.seed / "slurm.conf").write_text(text)
        # the kubelet service swaps `..data` in the ConfigMap volume, as the kubelet does
        r = run("podman", "start", "--attach", self.stack.name("kubelet"), check=False)
        if r.returncode != 0:
            raise StepFailed(f"the kubelet service failed: {r.stderr[-1000:]}")

    def step_jobs(self) -> str:
        for worker, limit in (("worker-1", "30"), ("worker-2", "5")):
            job = self.sbatch(
                "-w", worker, "-t", limit, "--wrap", "hostname > /tmp/job-$SLURM_JOB_ID; sleep 600"
            )
            self.jobs[worker] = job
        for worker, job in self.jobs.items():
            self.wait_job(job, {"RUNNING"})
            # the job's own file, read inside the worker's container: it ran there
            host = until(
                f"job {job}'s file in {worker}",
                lambda w=worker, j=job: self.stack.exec(w, "cat", f"/tmp/job-{j}", check=False).strip(),
                timeout=30,
            )
            if host != worker:
                raise StepFailed(f"job {job} ran on {host}, not {worker}")
        say(
            f"  jobs {self.jobs['worker-1']} (30 min limit) and {self.jobs['worker-2']} (5 min) RUNNING;"
            " each wrote its hostname in its own worker container's /tmp: worker-1, worker-2"
        )
        return f"jobs {', '.join(self.jobs.values())} running in the worker containers"

    def step_valid_change(self) -> str:
        before = self.status()["applied"]["generation"]
        conf = (self.stack.seed / "slurm.conf").read_text()
        started = time.monotonic()
        self.update_configmap(re.sub(r"MaxTime=\S+", "MaxTime=120", conf))
        say("  slurm.conf edited; the kubelet service swapped ..data in the ConfigMap volume: MaxTime -> 120")
        until(
            "the change applied",
            lambda: (s := self.status())["applied"]["generation"] > before and not s["pending"],
        )
        seconds = time.monotonic() - started
        part = self.slurm("scontrol", "-o", "show", "partition")
        if "MaxTime=02:00:00" not in part:
            raise StepFailed(f"slurmctld reports {part.strip()}")
        say(f"  applied and verified in {seconds:.2f}s; slurmctld container: MaxTime=02:00:00")
        return f"valid change applied in {seconds:.2f}s"

    def step_broken_change(self) -> str:
        good = (self.stack.seed / "slurm.conf").read_text()
        started = self.stack.inspect("slurmctld")["State"]["StartedAt"]
        self.update_configmap(good + "ThisIsNotAKey=1\n")
        say("  added ThisIsNotAKey=1 to slurm.conf in the ConfigMap volume")

        def rejected() -> dict[str, Any] | None:
            status = self.status()
            return status["rejected"] if status.get("rejected") and not status["pending"] else None

        rejection = until("the rejection", rejected)
        say(f"  rejected: {rejection['reason']}")
        self.slurm("scontrol", "ping")
        state = self.stack.inspect("slurmctld")["State"]
        if state["StartedAt"] != started or state["Status"] != "running":
            raise StepFailed("the slurmctld container restarted")
        staged = self.stack.exec("slurmctld", "cat", "/etc/slurm-sidecars/slurm/slurm.conf")
        if "ThisIsNotAKey" in staged:
            raise StepFailed("the broken file reached slurmctld's directory")
        say("  the slurmctld container kept running and answers; its directory holds the last good set")
        self.update_configmap(good)
        return "broken change rejected; slurmctld untouched"

    def step_scale_in(self) -> str:
        def both_busy() -> list[dict[str, Any]] | None:
            nodes = self.stack.get(self.control_plane + "/v1/nodes", self.token)
            busy = {n["name"] for n in nodes if n["jobs"]}
            return nodes if {"worker-1", "worker-2"} <= busy else None

        until("the control plane's view of both jobs", both_busy)
        order = self.stack.get(self.control_plane + "/v1/scale-in-order", self.token)
        say(f"  scale-in order (first to go first): {', '.join(order)}")
        if order[:2] != ["worker-2", "worker-1"]:
            raise StepFailed(f"worker-2 (5 min limit) should go before worker-1 (30 min): {order}")
        return "scale-in order: " + " > ".join(order)

    def step_drain(self) -> str:
        self.slurm("scancel", self.jobs["worker-2"])
        self.wait_job(self.jobs["worker-2"], {"CANCELLED", "COMPLETED"})
        job = self.sbatch("-w", "worker-2", "-t", "2", "--wrap", "sleep 4; date +%s.%N > /tmp/drain-job-done")
        self.wait_job(job, {"RUNNING"})
        say(f"  job {job} (4 s of work) runs on worker-2; its preStop command runs in the worker-2 container")
        started = time.monotonic()
        r = run("podman", "exec", self.stack.name("worker-2"), *PRESTOP, check=False)
        hook_done = time.time()
        state = self.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=30)
        if r.returncode != 0 or state != "COMPLETED":
            raise StepFailed(f"drain hook exit {r.returncode}, job {state}: {(r.stdout + r.stderr)[-800:]}")
        node = self.slurm("sinfo", "-h", "-n", "worker-2", "-o", "%T").strip()
        # a dynamic node (`slurmd -Z`) is drained, then its record deleted by the agent: gone is right
        # too, but only after the hook said it drained
        if not (node.startswith("drain") or (not node and '"result": "drained"' in r.stdout + r.stderr)):
            raise StepFailed(f"worker-2 is {node or 'gone'} after the hook: {(r.stdout + r.stderr)[-800:]}")
        node = node or "drained, and its dynamic node record deleted"
        ended = float(self.stack.exec("worker-2", "cat", "/tmp/drain-job-done"))
        lag = hook_done - ended
        run("podman", "stop", "-t", "30", self.stack.name("worker-2"))
        say(
            f"  job {job} COMPLETED (not killed); the hook returned {lag:.2f}s after the job's last command,"
            f" {time.monotonic() - started:.1f}s after it was called; worker-2 is {node}; container stopped"
        )
        return f"worker-2 drained and stopped; its job completed; hook returned {lag:.2f}s after it"

    def step_metrics(self) -> str:
        wanted = ("slurm_sidecars_config_applies_total", "slurm_sidecars_slurm_commands_total")
        shown = 0
        for name, url in (("config-sync", self.config_sync), ("control-plane", self.control_plane)):
            text = self.stack.get(url + "/metrics")
            for line in text.splitlines():
                if line.startswith(wanted) and not line.endswith(" 0.0") and shown < 8:
                    say(f"  {name}: {line}")
                    shown += 1
        if not shown:
            raise StepFailed("no metric series counted anything")
        return f"{shown} metric series shown"


def run_tour(stack: Stack) -> bool:
    tour = Tour(stack)
    steps: list[tuple[str, Callable[[], str]]] = [
        ("Jobs on the worker containers", tour.step_jobs),
        ("A valid config change", tour.step_valid_change),
        ("A broken config change", tour.step_broken_change),
        ("The scale-in order", tour.step_scale_in),
        ("A worker scaled in", tour.step_drain),
        ("The metrics", tour.step_metrics),
    ]
    results: list[tuple[str, bool, str]] = []
    for i, (title, step) in enumerate(steps, 1):
        say(f"\n[{i}/{len(steps)}] {title}")
        try:
            results.append((title, True, step()))
        except Exception as exc:
            say(f"  FAILED: {exc}")
            results.append((title, False, str(exc)))
    return summary(results)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(143)  # through the `finally` that removes what was made


def main() -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--project", default=f"sidecars-tour-{uuid.uuid4().hex[:8]}", help="compose project name")
    p.add_argument(
        "--up-only", action="store_true", help="bring the stack up and check it, then take it down"
    )
    args = p.parse_args()
    if shutil.which("podman-compose") is None:
        print("compose-tour: podman-compose is missing; `make images` installs it", file=sys.stderr)
        return 2
    seed = Path(tempfile.mkdtemp(prefix="sidecars-seed-"))
    shutil.copy(SEED / "slurm.conf", seed / "slurm.conf")
    seed.chmod(0o755)
    stack = Stack(args.project, seed)
    ok = False
    try:
        say(f"compose project {stack.project}: bringing up {len(stack.services())} services ...")
        started = time.monotonic()
        stack.up()
        say(f"every healthcheck passes ({time.monotonic() - started:.0f}s after the first container)")
        ok = True if args.up_only else run_tour(stack)
    except StepFailed as exc:
        say(f"FAILED: {exc}")
    finally:
        left = stack.down()
        shutil.rmtree(seed, ignore_errors=True)
        if left:
            say(f"left behind: {', '.join(left)}")
            ok = False
        else:
            say(f"down: no container, volume or network of {stack.project} is left")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
