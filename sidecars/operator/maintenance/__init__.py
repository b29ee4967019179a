"""`slurm-sidecars maintenance create|list|delete`: planned windows, through the control plane's API."""

from sidecars.operator.maintenance.main import MaintenanceSettings, configure, main, render

__all__ = ["MaintenanceSettings", "configure", "main", "render"]
