"""`slurm-sidecars drain-hook`: the preStop hook that asks the local worker agent to drain its node
and waits until it is drained (`main.py`: `configure`, `main`, and `drain`, the asking itself)."""

from sidecars.drainhook.main import configure, drain, main

__all__ = ["configure", "drain", "main"]
