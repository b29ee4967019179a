"""`slurm-sidecars probe livez|readyz|controller|metrics`: exec probes over a daemon's HTTP endpoints
(`main.py`: `configure`, `main`, and the checks themselves)."""

from sidecars.probe.main import check, check_controller, check_metrics, configure, main

__all__ = ["check", "check_controller", "check_metrics", "configure", "main"]
