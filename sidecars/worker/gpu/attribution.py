"""GPU -> job as one small metric that dashboards join DCGM's on, instead of a job label on every
DCGM series.

dcgm-exporter's `hpc_job` label (fed by the mapping files, `jobmap.py`) multiplies every DCGM
series (dozens of fields a GPU) by each job that ever ran there: soperator dropped it for that
(nebius/soperator#2923) and fell back to a node-granular join. This keeps the GPU grain at a bounded
cost: one series `slurm_sidecars_gpu_job{node,gpu,job_id} 1` per job holding a GPU *now*, gone when
the job lets go, and at most `jobs_per_gpu` of them a GPU (GPUs shared through shards or MPS can hold
many jobs: the ones past the cap are counted in `slurm_sidecars_gpu_jobs{node,gpu}`, which always says
how many hold it). So whatever the job count, the live series of a node are at most
GPUs x (jobs_per_gpu + 1), and a job adds one series per GPU it held, once, to one metric.

A dashboard joins DCGM's series on the GPU (dcgm-exporter labels `Hostname` and `gpu`):

    DCGM_FI_DEV_GPU_UTIL * on (Hostname, gpu) group_left (job_id)
      label_replace(slurm_sidecars_gpu_job, "Hostname", "$1", "node", "(.*)")

(docs/gpu-attribution.md holds the Grafana panel.)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

JOBS_PER_GPU = 4  # a GPU's job_id series, at most: the lowest job ids (the longest holders) first
# (name, help, labels) of the two gauges: one place for the collector and the metrics table
HELD = (
    "slurm_sidecars_gpu_job",
    "1 for each job holding a GPU now (at most 4 a GPU): join DCGM's series on node and gpu",
    ("node", "gpu", "job_id"),
)
COUNT = ("slurm_sidecars_gpu_jobs", "Jobs holding each GPU now (all of them)", ("node", "gpu"))
FAMILIES = (HELD, COUNT)


class GpuAttribution(Collector):
    """The current GPU -> jobs of one node as metrics, built at each scrape from the last mapping."""

    def __init__(self, node: str, jobs_per_gpu: int = JOBS_PER_GPU) -> None:
        if jobs_per_gpu < 1:
            raise ValueError(f"jobs_per_gpu must be at least 1, not {jobs_per_gpu}")
        self.node = node
        self.jobs_per_gpu = jobs_per_gpu
        self._mapping: dict[int, tuple[int, ...]] = {}

    def register(self, registry: CollectorRegistry) -> GpuAttribution:
        registry.register(self)
        return self

    def update(self, mapping: Mapping[int, list[int]]) -> None:
        """The GPUs' jobs now (`jobmap.gpu_jobs`): what the next scrape shows, and only that."""
        self._mapping = {gpu: tuple(sorted(ids)) for gpu, ids in mapping.items() if ids}

    def collect(self) -> Iterator[Metric]:
        held, count = (GaugeMetricFamily(name, doc, labels=list(labels)) for name, doc, labels in FAMILIES)
        for gpu, ids in sorted(self._mapping.items()):
            count.add_metric([self.node, str(gpu)], len(ids))
            for job in ids[: self.jobs_per_gpu]:
                held.add_metric([self.node, str(gpu), str(job)], 1)
        yield held
        yield count

    def describe(self) -> Iterator[Metric]:
        """The families, empty: what the registry checks its names against."""
        for name, doc, labels in FAMILIES:
            yield GaugeMetricFamily(name, doc, labels=list(labels))
