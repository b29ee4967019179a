"""A small "kubelet" (with the StatefulSet, Deployment and Job controllers' parts the upgrade rests
on) that maps the fake's objects onto a dev cluster's real daemons:

- slurmctld's StatefulSet: replicas 0 stops the cluster's slurmctld (gracefully: it saves its
  state); replicas 1 with an image whose tag names a release (`...:26.05`) starts that release's
  slurmctld on the same state (`swap.py`). A start that fails leaves its pod not Ready, in
  CrashLoopBackOff with the daemon's own last words, as a kubelet shows a container that exits.
- slurmdbd's Deployment: a new image swaps slurmdbd to that release, on the same database.
- a Job runs its container's command for real, `slurm-sidecars` as this checkout's, with each
  volume mount's path mapped to the hostPath of its volume (a claim: the directory `claims` names);
  its status follows the exit code, and its pod's terminated state carries the end of what it wrote
  (FallbackToLogsOnError).

Every pod is a real object of the fake, labelled as its controller labels it (the workload's
template labels, `job-name` for a Job), so the control plane reads them as it would in a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sidecars.devcluster.base import ClusterError
from sidecars.devcluster.release import Release
from sidecars.devcluster.startwatch import DaemonDied
from sidecars.devcluster.swap import SwappableCluster
from sidecars.runtime.waits import within
from tests.fakekube.server import FakeKube, Obj, now_micro

NAMESPACE = "slurm"
REGISTRY = "registry.example/slurm"


def image(role: str, release: Release) -> str:
    v = release.version.split(".")
    return f"{REGISTRY}/{role}:{v[0]}.{v[1]}"


@dataclass
class DevKubelet:
    fake: FakeKube
    cluster: SwappableCluster
    releases: Mapping[str, Release]  # "24.11" -> its release
    interval_seconds: float = 0.1
    job_timeout_seconds: float = 120.0
    ran: list[tuple[str, list[str], int]] = field(default_factory=list)  # (job, argv, exit code)
    _running: dict[str, str] = field(default_factory=dict)  # workload -> the image its daemon runs
    _failed: dict[str, str] = field(default_factory=dict)  # workload -> the image that did not start
    _jobs: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    worker_revision: str = ""  # the workers' StatefulSet's updateRevision ("" : no worker pods)
    worker_releases: dict[str, Release] = field(default_factory=dict)  # revision -> its slurmd's release
    claims: dict[str, str] = field(default_factory=dict)  # PersistentVolumeClaim name -> its directory here
    # a start that fails shows its first exit (terminated, no restart yet, finishedAt the death's
    # time to the second as a kubelet writes it), not the CrashLoopBackOff seconds later
    first_exit: bool = False

    # ------------------------------------------------------------------ the objects
    def create_workloads(self, state_location: Path) -> None:
        """slurmctld's StatefulSet (the StateSaveLocation on a hostPath volume, through a subPath)
        and slurmdbd's Deployment, each running its release now, with its pod Ready."""
        c = self.cluster
        mount = {"name": "statesave", "mountPath": str(state_location), "subPath": state_location.name}
        volume = {"name": "statesave", "hostPath": {"path": str(state_location.parent)}}
        ctld = self._workload(
            "StatefulSet", "slurmctld", image("slurmctld", c.release_of("slurmctld")), mount, volume
        )
        self.fake.stateful_sets[(NAMESPACE, "slurmctld")] = ctld
        dbd = self._workload(
            "Deployment", "slurmdbd", image("slurmdbd", c.release_of("slurmdbd")), None, None
        )
        self.fake.deployments[(NAMESPACE, "slurmdbd")] = dbd
        for kind, name in (("StatefulSet", "slurmctld"), ("Deployment", "slurmdbd")):
            obj = self._obj(kind, name)
            self._running[name] = self._image(obj)
            self._settle(kind, name, ready=True)

    def _workload(self, kind: str, name: str, img: str, mount: Obj | None, volume: Obj | None) -> Obj:
        labels = {"app.kubernetes.io/name": name}
        container: Obj = {"name": name, "image": img, "volumeMounts": [mount] if mount else []}
        return {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "uid": str(uuid.uuid4()),
                "generation": 1,
                "resourceVersion": self.fake._bump(),
                "creationTimestamp": now_micro()[:19] + "Z",
            },
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": dict(labels)},
                "template": {
                    "metadata": {"labels": dict(labels)},
                    "spec": {
                        "securityContext": {"runAsUser": os.getuid()},
                        "containers": [
                            container,
                            {"name": "config-sync", "image": f"{REGISTRY}/sidecars:1"},
                        ],
                        "volumes": [volume] if volume else [],
                    },
                },
            },
            "status": {},
        }

    def _obj(self, kind: str, name: str) -> Obj:
        store = self.fake.stateful_sets if kind == "StatefulSet" else self.fake.deployments
        return store[(NAMESPACE, name)]

    @staticmethod
    def _image(obj: Obj) -> str:
        return str(obj["spec"]["template"]["spec"]["containers"][0]["image"])

    def _release(self, img: str) -> Release:
        tag = img.rsplit(":", 1)[-1]
        if tag not in self.releases:
            raise ClusterError(f'Failed to pull image "{img}": manifest unknown')
        return self.releases[tag]

    # ------------------------------------------------------------------ pods and status
    def _pod(self, name: str, labels: Obj, ready: bool, statuses: list[Obj]) -> None:
        self.fake.put_pod(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "uid": str(uuid.uuid4()),
                    "labels": dict(labels),
                    "annotations": {},
                    "ownerReferences": [],
                    "creationTimestamp": now_micro()[:19] + "Z",
                },
                "spec": {"hostname": name, "containers": []},
                "status": {
                    "phase": "Running" if ready or statuses else "Pending",
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                    "containerStatuses": statuses,
                },
            }
        )

    def _pod_name(self, kind: str, name: str) -> str:
        return f"{name}-0" if kind == "StatefulSet" else f"{name}-7d9f8c6b5-x2x4z"

    def _settle(
        self, kind: str, name: str, *, ready: bool, words: str = "", died_at: float | None = None
    ) -> None:
        """Status as the controller writes it once the kubelet acted; the pod as it is now."""
        obj = self._obj(kind, name)
        replicas = obj["spec"].get("replicas", 1)
        pod = self._pod_name(kind, name)
        self.fake.remove_pod(NAMESPACE, pod)
        up = 1 if ready and replicas else 0
        if replicas:
            statuses = []
            if words and self.first_exit:
                when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(died_at or time.time()))
                ended = {"reason": "Error", "exitCode": 1, "message": words[-800:], "finishedAt": when}
                statuses = [
                    {
                        "name": name,
                        "image": self._image(obj),
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"terminated": ended},
                        "lastState": {},
                    }
                ]
            elif words:
                statuses = [
                    {
                        "name": name,
                        "image": self._image(obj),
                        "imageID": "",
                        "ready": False,
                        "restartCount": 3,
                        "state": {
                            "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting"}
                        },
                        "lastState": {
                            "terminated": {"reason": "Error", "exitCode": 1, "message": words[-800:]}
                        },
                    }
                ]
            self._pod(pod, obj["spec"]["selector"]["matchLabels"], ready, statuses)
        obj["status"] = {
            "observedGeneration": obj["metadata"]["generation"],
            "replicas": 1 if replicas else 0,
            "readyReplicas": up,
            "availableReplicas": up,
            "updatedReplicas": 1 if replicas else 0,
        }
        obj["metadata"]["resourceVersion"] = self.fake._bump()

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        """Act on what changed, until cancelled."""
        try:
            while True:
                await self._slurmctld()
                await self._slurmdbd()
                await self._workers()
                self._start_jobs()
                await asyncio.sleep(self.interval_seconds)
        finally:
            for task in self._jobs.values():
                task.cancel()
            for task in self._jobs.values():
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _slurmctld(self) -> None:
        obj = self._obj("StatefulSet", "slurmctld")
        want, img = obj["spec"].get("replicas", 1), self._image(obj)
        running = self._running.get("slurmctld")
        if want == 0 and (running or obj["status"].get("replicas")):
            await self.cluster.stop_slurmctld()  # the kubelet's SIGTERM: slurmctld saves its state
            self._running.pop("slurmctld", None)
            self._settle("StatefulSet", "slurmctld", ready=False)
        elif want and running != img and self._failed.get("slurmctld") != img:
            if running:
                await self.cluster.stop_slurmctld()
                self._running.pop("slurmctld", None)
            try:
                await self.cluster.start_slurmctld_of(self._release(img), timeout=30)
            except ClusterError as e:
                self._failed["slurmctld"] = img
                with contextlib.suppress(ClusterError):
                    await self.cluster.stop_slurmctld(crash=True)
                # the container's log, as FallbackToLogsOnError puts it in the terminated message
                self._settle(
                    "StatefulSet",
                    "slurmctld",
                    ready=False,
                    words=f"{self.cluster.ctld_stderr_tail()} ({e})",
                    died_at=e.died_at if isinstance(e, DaemonDied) else None,
                )
                return
            self._running["slurmctld"] = img
            self._failed.pop("slurmctld", None)
            self._settle("StatefulSet", "slurmctld", ready=True)
        elif obj["status"].get("observedGeneration") != obj["metadata"]["generation"]:
            self._settle("StatefulSet", "slurmctld", ready=running == img)

    async def _slurmdbd(self) -> None:
        obj = self._obj("Deployment", "slurmdbd")
        img = self._image(obj)
        if self._running.get("slurmdbd") == img or self._failed.get("slurmdbd") == img:
            return
        try:
            await self.cluster.swap_slurmdbd(self._release(img), timeout=60)
        except ClusterError as e:
            self._failed["slurmdbd"] = img
            died_at = e.died_at if isinstance(e, DaemonDied) else None
            self._settle("Deployment", "slurmdbd", ready=False, words=str(e), died_at=died_at)
            return
        self._running["slurmdbd"] = img
        self._settle("Deployment", "slurmdbd", ready=True)

    # ------------------------------------------------------------------ workers
    def create_workers(self, revision: str, releases: Mapping[str, Release]) -> None:
        self.worker_revision = revision
        self.worker_releases = dict(releases)
        for node in self.cluster.node_names:
            self._worker(node, revision)

    def _worker(self, node: str, revision: str) -> None:
        self.fake.add_pod(
            f"slurmd-{node}",
            namespace=NAMESPACE,
            hostname=node,
            labels={"app": "slurmd", "controller-revision-hash": revision},
            owner_kind="StatefulSet",
        )

    async def _workers(self) -> None:
        if not self.worker_revision:
            return
        for node in self.cluster.node_names:
            if (NAMESPACE, f"slurmd-{node}") not in self.fake.pods:  # deleted: OnDelete replaces it
                await self.cluster.swap_slurmd(node, self.worker_releases[self.worker_revision])
                self._worker(node, self.worker_revision)

    # ------------------------------------------------------------------ jobs
    def _start_jobs(self) -> None:
        for (ns, name), job in list(self.fake.jobs.items()):
            if name not in self._jobs:
                self._jobs[name] = asyncio.create_task(
                    self._run_job(ns, name, job), name=f"devkubelet-{name}"
                )

    def _argv(self, pod: Obj) -> tuple[list[str], dict[str, str]]:
        c = pod["containers"][0]
        hosts = {
            v["name"]: v.get("hostPath", {}).get("path")
            or self.claims.get(v.get("persistentVolumeClaim", {}).get("claimName", ""))
            for v in pod.get("volumes") or []
        }
        paths = {
            m["mountPath"]: hosts[m["name"]] for m in c.get("volumeMounts") or [] if hosts.get(m["name"])
        }

        def mapped(word: str) -> str:
            for inside, outside in sorted(paths.items(), key=lambda p: -len(p[0])):
                word = word.replace(inside, outside)
            return word

        argv = [mapped(str(w)) for w in [*(c.get("command") or []), *(c.get("args") or [])]]
        if argv and argv[0] == "slurm-sidecars":
            argv = [sys.executable, "-m", "sidecars", *argv[1:]]
        env = {v["name"]: v["value"] for v in c.get("env") or [] if "value" in v}
        return argv, env

    async def _run_job(self, ns: str, name: str, job: Obj) -> None:
        template = job["spec"]["template"]
        argv, env = self._argv(template["spec"])
        pod = f"{name}-{uuid.uuid4().hex[:5]}"
        self._pod(pod, template["metadata"]["labels"], False, [])
        job["status"] = {"active": 1, "startTime": now_micro()[:19] + "Z"}
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **env},
            cwd=self.cluster.dir,
        )
        try:
            out, _ = await within(proc.communicate(), self.job_timeout_seconds)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        code = proc.returncode or 0
        self.ran.append((name, argv, code))
        said = out.decode(errors="replace").strip()[-800:]
        ended = {
            "terminated": {"reason": "Completed" if code == 0 else "Error", "exitCode": code, "message": said}
        }
        if (ns, pod) in self.fake.pods:
            p = copy.deepcopy(self.fake.pods[(ns, pod)])
            p["status"] = {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [
                    {
                        "name": "c",
                        "image": "c",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": ended,
                    }
                ],
            }
            self.fake.pods[(ns, pod)] = p
            self.fake.touch_pod(p)
        if code == 0:
            cond = {"type": "Complete", "status": "True"}
            job["status"] = {"succeeded": 1, "conditions": [cond]}
        else:
            cond = {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
            }
            job["status"] = {"failed": 1, "conditions": [cond]}
