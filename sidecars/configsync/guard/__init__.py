"""`slurm-sidecars config-guard`: slurmctld's entrypoint step that puts the last verified set back
when the set on disk was never verified (`main.py`: `configure`, `main`)."""

from sidecars.configsync.guard.main import configure, main

__all__ = ["configure", "main"]
