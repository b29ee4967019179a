"""`slurm-sidecars check-secret`: an init step that refuses an empty, short or placeholder key
(`main.py`: `configure`, `main`; the rules are `sidecars.runtime.secretcheck`'s)."""

from sidecars.check_secret.main import configure, main

__all__ = ["configure", "main"]
