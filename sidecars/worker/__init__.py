"""The worker agent beside every slurmd (`slurm-sidecars worker`).

- `settings`: flags/env -> one frozen `WorkerSettings`.
- `source`: the node's state: Slurm directly (low rate; fast only while a drain waits) or the
  control plane's long poll (`GET /v1/nodes/{name}?version=V&wait=S`), falling back to Slurm.
- `drain`: the preStop drain, fail-closed, recorded in the pod-lifetime state directory.
- `registration` + `slurmd`: is slurmd registered; restart it (command or signal) with backoff;
  then declare the pod unregistered (readiness, metric, Event, control-plane report).
- `jobmap`: dcgm-exporter's GPU-index -> job id files.
- `trusted`: the agent's directories and SLURM_CONF must be safe from a job's user.
- `api`: the unix socket the hook calls (`POST /v1/drain`, `GET /v1/drain`).
- `service`: the daemon tying them together, with /livez /readyz /metrics /status.
- `main`: the command (`configure`, `main`): flags to a running agent, with its Slurm node's name,
  features and claim resolved first.
"""
