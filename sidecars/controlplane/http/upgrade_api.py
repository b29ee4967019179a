"""`/v1/upgrade`: start, read, pause and resume a paced roll of the worker pods, or (`/v1/upgrade/cluster`)
a whole-cluster upgrade in Slurm's order; one of them at a time (writes: leader only)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from sidecars.controlplane.changes.budget import UpgradeError
from sidecars.controlplane.changes.cluster_upgrade.run import ROLES, ClusterUpgrades
from sidecars.controlplane.changes.upgrade import Upgrade
from sidecars.controlplane.fleet.snapshot import FleetNode
from sidecars.controlplane.fleet.versions import AgentVersions, describe, guard_inputs
from sidecars.controlplane.http.bodies import read_body
from sidecars.controlplane.http.errors import Leadership, error, not_leader
from sidecars.controlplane.http.openapi import upgrade as openapi_upgrade
from sidecars.kube import KubeError
from sidecars.slurm import SlurmClient, SlurmError, Version, daemons, slurmdbd_version

LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
VERSION = re.compile(r"^\d{2}\.\d{2}(\.\d+)?$")
# the document's patterns, matched whole (`$` alone lets a trailing newline through)
CLUSTER_VERSION = re.compile(openapi_upgrade.CLUSTER_VERSION.strip("^$"))
IMAGE = re.compile(openapi_upgrade.IMAGE.strip("^$"))


def unavailable(kubernetes_on: bool) -> str:
    """Why a control plane without the Kubernetes API cannot roll the workers, and how to give it one."""
    why = (
        "this control plane was started with --kubernetes=off"
        if not kubernetes_on
        else "this control plane found none (no in-cluster service account, no --kubeconfig, no $KUBECONFIG)"
    )
    return (
        "paced upgrades replace worker pods (a StatefulSet's or a Deployment's) through the Kubernetes "
        f"API, and {why}: run it in the cluster beside slurmctld, or give it --kubeconfig FILE "
        "(docs/maintenance.md, Upgrades)"
    )


@dataclass(eq=False)
class UpgradeAPI:
    upgrade: Upgrade | None
    slurm: SlurmClient
    leadership: Leadership
    versions: AgentVersions = field(default_factory=AgentVersions)
    records: Callable[[], Mapping[str, FleetNode]] = dict  # the fleet view's nodes: their registered Version
    why_unavailable: str = "upgrades need the Kubernetes API"  # said, when `upgrade` is None, by every answer
    cluster: ClusterUpgrades | None = None
    _controller: tuple[Version, float] | None = field(default=None, init=False)
    _slurmdbd: str | None = field(default=None, init=False)  # read with the controller's release
    # the whole-cluster upgrade's stages when the releases were read
    _moves_seen: str = field(default="", init=False)

    def install(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/v1/upgrade", self.show)
        r.add_post("/v1/upgrade", self.start)
        r.add_post("/v1/upgrade/cluster", self.start_cluster)
        r.add_post("/v1/upgrade/pause", self.pause)
        r.add_post("/v1/upgrade/resume", self.resume)

    def _refused(self) -> web.Response | None:
        if self.upgrade is None:
            return error(409, self.why_unavailable)
        return not_leader(self.leadership)

    async def _slurm_versions(self) -> tuple[Version, dict[str, Version], Version | None]:
        """slurmctld's release, each node record's (what its slurmd registered with) and, where
        slurmctld sends its records to a slurmdbd, slurmdbd's (asked of slurmdbd itself), now."""
        config = await self.slurm.show_config()
        controller = Version.parse(config.get("SLURM_VERSION", ""))
        records = {n.name: Version.parse(n.version) for n in await self.slurm.nodes() if n.version}
        self._controller = (controller, time.monotonic())
        slurmdbd = None
        if config.get("AccountingStorageType", "") == daemons.ACCOUNTING_SLURMDBD:
            try:
                slurmdbd = await slurmdbd_version(self.slurm)
            except SlurmError as exc:
                # unknown is not "fine": slurmdbd must be the newest, so a roll waits until it is read
                raise UpgradeError(
                    409, f"version skew: slurmdbd's release could not be read ({exc.message}); slurmdbd first"
                ) from None
        return controller, records, slurmdbd

    def _cluster_moves(self) -> str:
        report = self.cluster.report() if self.cluster is not None else None
        return "" if report is None else repr([(s["name"], s["state"]) for s in report["stages"]])

    async def _accounting(self, config: Mapping[str, str]) -> str | None:
        """slurmdbd's release where slurmctld sends its records to one ("unreadable: ..." when it
        does not answer), None without accounting; read with slurmctld's, at most once a minute."""
        if config.get("AccountingStorageType", "") != daemons.ACCOUNTING_SLURMDBD:
            return None
        try:
            return str(await slurmdbd_version(self.slurm))
        except SlurmError as exc:
            return f"unreadable: {exc.message}"

    async def show(self, _: web.Request) -> web.Response:
        # a read costs Slurm nothing of its own: the records from the fleet view, slurmctld's
        # release read at most once a minute (it changes only with a restart)
        records = {n.name: Version.parse(n.version) for n in self.records().values() if n.version}
        try:
            # a whole-cluster upgrade's stage that moved since the last read moved a release too
            moved = self._cluster_moves() != self._moves_seen
            if self._controller is None or time.monotonic() - self._controller[1] > 60 or moved:
                self._moves_seen = self._cluster_moves()
                config = await self.slurm.show_config()
                self._controller = (Version.parse(config.get("SLURM_VERSION", "")), time.monotonic())
                self._slurmdbd = await self._accounting(config)
            versions = {
                **describe(self._controller[0], self.versions.fresh(), records),
                daemons.SLURMDBD: self._slurmdbd,
            }
        except SlurmError as exc:
            versions = {**describe(None, self.versions.fresh(), records), "error": exc.message}
        if self.cluster is not None and self.leadership.is_leader:  # only the holder marks a cut one
            await self.cluster.ensure_loaded()
        cluster = self._cluster_report()
        if self.upgrade is None:
            body = {"upgrade": None, "unavailable": self.why_unavailable, "versions": versions, **cluster}
            return web.json_response(body)
        try:
            # the leader holds the plan it wrote; a follower's may be stale: it reads the ConfigMap
            await (self.upgrade.current() if self.leadership.is_leader else self.upgrade.load())
        except Exception as exc:  # the Kubernetes API after the edge's retries
            return error(503, f"cannot read the upgrade plan: {exc}")
        return web.json_response({**self.upgrade.report(), "versions": versions, **cluster})

    def _cluster_report(self) -> dict[str, Any]:
        """`cluster`: the whole-cluster upgrade under way or the last, per stage (null when none);
        `cluster_unavailable`: why none can start here, when none can."""
        if self.cluster is None:
            return {"cluster": None, "cluster_unavailable": "this control plane has no whole-cluster upgrade"}
        out: dict[str, Any] = {"cluster": self.cluster.report()}
        if self.cluster.roles is None:
            out["cluster_unavailable"] = self.cluster.why_unavailable
        if self.cluster.store_error:
            out["cluster_error"] = self.cluster.store_error
        return out

    async def _roll_under_way(self) -> str | None:
        """The worker roll's revision while one is not complete (a cluster upgrade waits for it)."""
        if self.upgrade is None:
            return None
        await self.upgrade.current()
        up = self.upgrade.report()["upgrade"]
        return None if up is None or up["complete"] else str(up["revision"])

    async def start_cluster(self, request: web.Request) -> web.Response:
        # checked here, field by field, against the document's schema: a bad field is a 400 naming it
        body = await read_body(request, {"type": "object"})
        if isinstance(body, web.Response):
            return body
        extra = sorted(set(body) - {"slurm_version", "images"})
        if extra:
            return error(400, f"unknown fields: {', '.join(extra)}")
        target, images = body.get("slurm_version"), body.get("images")
        if not isinstance(target, str) or not CLUSTER_VERSION.fullmatch(target):
            return error(400, "slurm_version must be a Slurm release such as 26.05 or 26.05.1")
        if not isinstance(images, dict) or sorted(images) != sorted(ROLES):
            return error(
                400,
                f"images must name exactly {', '.join(ROLES)}: each role's image or revision",
            )
        bad = sorted(r for r, v in images.items() if not isinstance(v, str) or not IMAGE.fullmatch(v))
        if bad:
            return error(400, f"the image of {', '.join(bad)} must be an image reference or a revision")
        if self.cluster is None:
            return error(409, "this control plane has no whole-cluster upgrade")
        refused = not_leader(self.leadership)
        if refused is not None:
            return refused
        try:
            rolling = await self._roll_under_way()
        except Exception as exc:  # the Kubernetes API after the edge's retries
            return error(503, f"cannot read the upgrade plan: {exc}")
        if rolling is not None:
            return error(409, f"a roll of the workers to {rolling} runs: wait for its end")
        await self.cluster.ensure_loaded()  # an upgrade a former holder left is gone on, never beside
        try:
            up = self.cluster.start(Version.parse(target), images)
        except UpgradeError as exc:
            return error(exc.status, exc.message)
        return web.json_response({"started": str(up.target), "images": up.status.images}, status=201)

    async def start(self, request: web.Request) -> web.Response:
        body = await read_body(request, openapi_upgrade.schemas()["UpgradeRequest"])
        if isinstance(body, web.Response):  # the schema's 422, an unknown field among them
            return body
        rev, budget, target = body.get("revision"), body.get("budget"), body.get("slurm_version")
        deployment = body.get("deployment")
        if (rev is None) == (deployment is None):
            return error(422, "give either revision (a StatefulSet's new revision) or deployment (its name)")
        if rev is not None and (not isinstance(rev, str) or not LABEL_VALUE.match(rev)):
            return error(
                422, "revision must be the new pods' revision label value (controller-revision-hash)"
            )
        if not isinstance(budget, str):
            return error(422, "budget must be a string: a number of workers or a percentage, e.g. 25%")
        if target is not None and (not isinstance(target, str) or not VERSION.match(target)):
            return error(422, "slurm_version must be a Slurm release such as 24.11 or 24.11.5")
        refused = self._refused()
        if refused is not None:
            return refused
        assert self.upgrade is not None
        if self.cluster is not None and self.cluster.running:
            return error(409, "a whole-cluster upgrade runs (it rolls the workers itself): wait for its end")
        try:
            controller, records, slurmdbd = await self._slurm_versions()
            slurmds = guard_inputs(self.versions.fresh(), records)
            plan = await self.upgrade.start(
                rev or "",
                budget,
                controller=controller,
                slurmds=slurmds,
                target=Version.parse(target) if target else None,
                deployment=deployment or "",
                slurmdbd=slurmdbd,
            )
        except UpgradeError as exc:
            return error(exc.status, exc.message)
        except SlurmError as exc:
            return error(503, f"Slurm unreachable: {exc.message}")
        except KubeError as exc:  # after the edge's retries
            return error(503, f"the Kubernetes API failed: {exc}")
        return web.json_response({"started": plan.revision, "budget": plan.budget}, status=201)

    async def _pause(self, paused: bool) -> web.Response:
        cluster_here = self.cluster is not None and self.cluster.roles is not None
        if self.cluster is not None and (self.cluster.running or (cluster_here and self.upgrade is None)):
            # one upgrade at a time: that one (none running where only it can run: a 404 says so)
            refused = not_leader(self.leadership)
            if refused is not None:
                return refused
            try:
                up = self.cluster.set_paused(paused)
            except UpgradeError as exc:
                return error(exc.status, exc.message)
            return web.json_response(
                {"target": str(up.target), "paused": up.status.paused, "state": up.status.state}
            )
        refused = self._refused()
        if refused is not None:
            return refused
        assert self.upgrade is not None
        try:
            plan = await self.upgrade.set_paused(paused)
        except UpgradeError as exc:
            return error(exc.status, exc.message)
        return web.json_response({"revision": plan.revision, "paused": plan.paused})

    async def pause(self, _: web.Request) -> web.Response:
        return await self._pause(True)

    async def resume(self, _: web.Request) -> web.Response:
        return await self._pause(False)
