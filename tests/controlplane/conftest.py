"""A control plane in-process against the real dev cluster, with the fake Kubernetes API when asked."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from prometheus_client import CollectorRegistry

from sidecars.controlplane.fleet.snapshot import FleetSnapshot
from sidecars.controlplane.reconcile import Reconciler, View
from sidecars.controlplane.reconcile.deps import WriterDeps
from sidecars.controlplane.service import ControlPlaneService
from sidecars.controlplane.settings import ControlPlaneSettings, LeaseSettings
from sidecars.devcluster import DevCluster
from sidecars.kube import KubeClient, Pod
from sidecars.kube.client import KubeRetry
from sidecars.slurm import RetryPolicy, SlurmClient
from tests.fakekube import configuration
from tests.helpers import eventually
from tests.settings import (
    TOKEN,
    VIEWER,  # noqa: F401 - tests here import it from this module
    build,
)

T = TypeVar("T")


async def one_pass(writer: Reconciler, pods: Sequence[Pod], snap: FleetSnapshot) -> int:
    """One pass of a writer on its own; its writes."""
    return (await writer.reconcile(View(pods, snap))).writes


class Unused:
    """A writer's dependency its test did not give: any use of it fails the test, naming it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        raise AssertionError(f"the writer used deps.{self.name}.{attr}, which this test did not give")

    def __call__(self, *args: Any, **kw: Any) -> Any:
        raise AssertionError(f"the writer called deps.{self.name}, which this test did not give")


def writer_deps(**given: Any) -> WriterDeps:
    """The writers' shared dependencies, for one writer tested on its own: what the test gives; a
    worker pod's hostname as its Slurm node, namespace `slurm`, Slinky mode off, no ComputeDomains,
    the real monotonic clock; anything else `Unused`."""
    defaults: dict[str, Any] = {
        "node_of": lambda p: p.hostname,
        "namespace": "slurm",
        "slinky_mode": False,
        "domains": None,
    }
    fields = dataclasses.fields(WriterDeps)
    if unknown := given.keys() - {f.name for f in fields}:
        raise TypeError(f"WriterDeps has no {sorted(unknown)}")
    required = {f.name for f in fields if f.default is dataclasses.MISSING}  # the others keep theirs
    return WriterDeps(**({n: defaults.get(n, Unused(n)) for n in required} | given))


def offline(**overrides: Any) -> ControlPlaneService:
    """A control plane built, not started, without the Kubernetes API (--kubernetes=off)."""
    return ControlPlaneService(
        build(ControlPlaneSettings, kubernetes=False, **overrides), SlurmClient(), None, CollectorRegistry()
    )


# the product's Lease (ControlPlaneSettings' default): a holder may write for 2/3 of it after each
# renewal is sent, 10 s, which no loaded machine's slow renewal eats (the tests' 6 s left 4 s, and
# one renewal beside the hog at load 28 took longer); for tests whose holders must keep leading
PRODUCT_LEASE_SECONDS: float = LeaseSettings().duration_seconds


@dataclass
class Running:
    plane: ControlPlaneService
    url: str
    session: aiohttp.ClientSession
    registry: CollectorRegistry

    async def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        async with self.session.get(self.url + path, **kw) as r:
            return r.status, await r.json(content_type=None) if r.content_length != 0 else None

    async def post(self, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
        async with self.session.post(self.url + path, json=body, **kw) as r:
            text = await r.text()
            return r.status, text

    def sample(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    async def counted(
        self, name: str, ok: Callable[[float], bool] = lambda n: n >= 1, *, what: str, **labels: str
    ) -> float:
        """The metric `name{labels}` once `ok` holds of it: a count is made after what it counts
        (a command's return, after Slurm already shows its write), so a test waits for the count
        itself rather than read it as soon as the effect shows."""
        return await eventually(lambda: asyncio.sleep(0.05, self.sample(name, **labels)), ok, what=what)

    def leading(self, *parts: str) -> bool:
        """Leader, with its pods listed and named, and each named part of it (`cordons`,
        `topology`, ...) present and ready: what a test waits for before it acts."""
        plane = self.plane
        return bool(
            plane.leader.is_leader
            and plane.workers.pods is not None
            and plane.workers.pods.synced.is_set()
            and plane.workers.naming_ready
            and all(part in plane.writers and plane.writers[part].ready for part in parts)
        )


@contextlib.asynccontextmanager
async def control_plane(
    cluster: DevCluster,
    kube_url: str | None = None,
    kube_token: str = "fake-token",
    prepare: Callable[[ControlPlaneService], None] | None = None,
    ready: bool = True,
    **overrides: Any,
) -> AsyncIterator[Running]:
    """A running control plane, once it has read the fleet (unless not `ready`: slurmctld may be
    down); `prepare` sees it before it starts."""
    registry = CollectorRegistry()
    slurm = cluster.client(timeout=3.0, retry=RetryPolicy(attempts=2, max_seconds=1.0, initial_wait=0.05))
    async with contextlib.AsyncExitStack() as stack:
        kube = None
        if kube_url is not None:
            kube = await stack.enter_async_context(
                KubeClient(
                    configuration(kube_url, kube_token),
                    retry=KubeRetry(attempts=3, initial_wait=0.01, max_wait=0.05),
                )
            )
        plane = ControlPlaneService(build(ControlPlaneSettings, **overrides), slurm, kube, registry)
        if prepare is not None:
            prepare(plane)
        port = await stack.enter_async_context(plane.running())
        session = await stack.enter_async_context(
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"})
        )
        running = Running(plane, f"http://127.0.0.1:{port}", session, registry)
        if ready:
            await eventually(lambda: running.get("/readyz"), lambda r: r[0] == 200, what="first fleet read")
        yield running
