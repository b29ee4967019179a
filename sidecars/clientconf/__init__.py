"""`slurm-sidecars client-conf`: an init step that renders the minimal client slurm.conf a sidecar's
Slurm commands read (`main.py`: `configure`, `main`; the rendering is `sidecars.slurm.clientconf`)."""

from sidecars.clientconf.main import configure, main

__all__ = ["configure", "main"]
