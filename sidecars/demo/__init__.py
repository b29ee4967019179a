"""`slurm-sidecars demo`: the sidecars on a real Slurm on this machine, no Kubernetes needed
(`main.py`: `configure`, `main`; `stack` starts the processes, `tour` walks through the features,
`live` redraws the status table)."""
