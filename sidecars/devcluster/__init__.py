"""A real local Slurm for tests and the demo (see `cluster.py`)."""

from sidecars.devcluster.cluster import ClusterError, DevCluster
from sidecars.devcluster.ports import free_port
from sidecars.devcluster.release import Release, ReleaseUnavailable, build_chroot, host_release
from sidecars.devcluster.slurmconf import ClusterSpec

__all__ = [
    "ClusterError",
    "ClusterSpec",
    "DevCluster",
    "Release",
    "ReleaseUnavailable",
    "build_chroot",
    "free_port",
    "host_release",
]
