"""The fake API server's apps/v1 StatefulSets (get, strategic-merge and merge patch, the scale
subresource) and batch/v1 Jobs (create with a name or a generateName, get, delete), in the real
REST paths and JSON. Nothing here plays a controller: a test's bridge (tests/controlplane/changes/
kubelet_bridge.py) reads spec and writes status, as the StatefulSet and Job controllers and the
kubelet would.
"""

from __future__ import annotations

import copy
import secrets
import uuid

from aiohttp import web

from tests.fakekube.server import (
    BODY,
    FakeKube,
    Obj,
    content_type,
    merge_patch,
    not_a_merge_patch,
    not_found,
    now_micro,
    refusal,
    strategic_merge,
)

STRATEGIC = "application/strategic-merge-patch+json"


def patched(request: web.Request, found: Obj) -> Obj | web.Response:
    """`found` with the request's patch applied (strategic or JSON merge), or the refusal."""
    if (refused := not_a_merge_patch(request)) is not None:
        return refused
    patch = request[BODY]
    if not isinstance(patch, dict):
        return refusal(400, "BadRequest", "patch is not an object")
    merge = strategic_merge if content_type(request) == STRATEGIC else merge_patch
    return merge(copy.deepcopy(found), patch)


class Workloads:
    """The handlers, over `fake.stateful_sets` and `fake.jobs`."""

    def __init__(self, fake: FakeKube) -> None:
        self.fake = fake

    def routes(self, app: web.Application) -> None:
        sts = "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}"
        app.router.add_get(sts, self.get_stateful_set)
        app.router.add_patch(sts, self.patch_stateful_set)
        app.router.add_get(sts + "/scale", self.get_scale)
        app.router.add_patch(sts + "/scale", self.patch_scale)
        jobs = "/apis/batch/v1/namespaces/{ns}/jobs"
        app.router.add_post(jobs, self.create_job)
        app.router.add_get(jobs + "/{name}", self.get_job)
        app.router.add_delete(jobs + "/{name}", self.delete_job)

    # ------------------------------------------------------------------ stateful sets
    def _sts(self, request: web.Request) -> Obj | None:
        return self.fake.stateful_sets.get((request.match_info["ns"], request.match_info["name"]))

    async def get_stateful_set(self, request: web.Request) -> web.StreamResponse:
        found = self._sts(request)
        return web.json_response(found) if found else not_found("statefulsets.apps", request)

    def _store(self, request: web.Request, found: Obj, changed: Obj) -> Obj:
        if changed["spec"] != found["spec"]:
            changed["metadata"]["generation"] = found["metadata"].get("generation", 1) + 1
        changed["metadata"]["resourceVersion"] = self.fake._bump()
        self.fake.stateful_sets[(request.match_info["ns"], request.match_info["name"])] = changed
        return changed

    async def patch_stateful_set(self, request: web.Request) -> web.StreamResponse:
        found = self._sts(request)
        if found is None:
            return not_found("statefulsets.apps", request)
        changed = patched(request, found)
        if isinstance(changed, web.Response):
            return changed
        return web.json_response(self._store(request, found, changed))

    @staticmethod
    def _scale(sts: Obj) -> Obj:
        labels = sts["spec"]["selector"]["matchLabels"]
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {k: sts["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion")},
            "spec": {"replicas": sts["spec"].get("replicas", 1)},
            "status": {
                "replicas": sts.get("status", {}).get("replicas", 0),
                "selector": ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
            },
        }

    async def get_scale(self, request: web.Request) -> web.StreamResponse:
        found = self._sts(request)
        return web.json_response(self._scale(found)) if found else not_found("statefulsets.apps", request)

    async def patch_scale(self, request: web.Request) -> web.StreamResponse:
        found = self._sts(request)
        if found is None:
            return not_found("statefulsets.apps", request)
        scale = patched(request, self._scale(found))
        if isinstance(scale, web.Response):
            return scale
        replicas = scale.get("spec", {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            return refusal(422, "Invalid", f'Scale.autoscaling "{found["metadata"]["name"]}" is invalid')
        changed = copy.deepcopy(found)
        changed["spec"]["replicas"] = replicas
        return web.json_response(self._scale(self._store(request, found, changed)))

    # ------------------------------------------------------------------ jobs
    async def create_job(self, request: web.Request) -> web.StreamResponse:
        job, ns = request[BODY], request.match_info["ns"]
        if not isinstance(job, dict) or not isinstance(job.get("metadata"), dict):
            return refusal(400, "BadRequest", "not a Job")
        meta = job["metadata"]
        name = meta.get("name") or meta.get("generateName", "") + secrets.token_hex(3)[:5]
        if not name:
            return refusal(422, "Invalid", "Job.batch is invalid: metadata.name: Required value")
        if (ns, name) in self.fake.jobs:
            return refusal(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
        template = (job.get("spec") or {}).get("template") or {}
        if not ((template.get("spec") or {}).get("containers")):
            return refusal(
                422, "Invalid", "Job.batch is invalid: spec.template.spec.containers: Required value"
            )
        job.update(apiVersion="batch/v1", kind="Job")
        uid = str(uuid.uuid4())
        meta.update(
            name=name, namespace=ns, uid=uid, resourceVersion=self.fake._bump(), creationTimestamp=now_micro()
        )
        # the Job controller's labels on its pods (batch/v1 selector generation)
        job_labels = {"batch.kubernetes.io/job-name": name, "job-name": name, "controller-uid": uid}
        template.setdefault("metadata", {}).setdefault("labels", {}).update(job_labels)
        job["status"] = {}
        self.fake.jobs[(ns, name)] = job
        return web.json_response(job, status=201)

    async def get_job(self, request: web.Request) -> web.StreamResponse:
        found = self.fake.jobs.get((request.match_info["ns"], request.match_info["name"]))
        return web.json_response(found) if found else not_found("jobs.batch", request)

    async def delete_job(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["ns"], request.match_info["name"]
        found = self.fake.jobs.pop((ns, name), None)
        if found is None:
            return not_found("jobs.batch", request)
        for (pns, pname), pod in list(self.fake.pods.items()):
            if pns == ns and pod["metadata"].get("labels", {}).get("job-name") == name:
                self.fake.remove_pod(ns, pname)  # background propagation: its pods go too
        return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"})
