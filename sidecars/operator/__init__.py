"""The operator's commands: what a person holding the operator's (or viewer's) credential runs.

- `maintenance/`: `slurm-sidecars maintenance create|list|delete`, planned windows;
- `upgrade/`: `slurm-sidecars upgrade start|status|pause|resume`, a paced roll of the workers;
- `status/`: `slurm-sidecars status`, the cluster at a glance (through the control plane, or
  straight from Slurm);
- `client.py`: the control plane's API as these commands call it (`ControlPlaneClient`).

Each command is a package whose `main.py` holds `configure(parser)` and `main(args)`, as every role's
does. The CLI loads only the command it runs, so nothing is imported here.
"""
