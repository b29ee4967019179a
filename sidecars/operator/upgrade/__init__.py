"""`slurm-sidecars upgrade start|status|pause|resume`: a paced roll of the workers, through the
control plane's API."""

from sidecars.operator.upgrade.main import UpgradeSettings, configure, main, render

__all__ = ["UpgradeSettings", "configure", "main", "render"]
