"""`slurm-sidecars state copy|restore`: the StateSaveLocation copied to a sibling directory on the
same volume and back, each verified file by file (`main.py`: `configure`, `main`; the copying is
`tree.py`'s). Run as a Kubernetes Job by a whole-cluster upgrade while slurmctld is stopped."""

from sidecars.statecopy.main import configure, main

__all__ = ["configure", "main"]
