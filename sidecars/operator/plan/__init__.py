"""`slurm-sidecars plan -f FILE|DIR|-`: what a config change would do, before it is merged.

- `inputs.py`: the candidate, from a directory of files or the Kubernetes YAML of its ConfigMaps
  and Secrets (several documents, `kubectl kustomize` output on stdin);
- `offline.py`: config-sync's pipeline run here on the local Slurm, against an empty state;
- `render.py`: the answer as Markdown for a pull-request comment (JSON is the plan's own form);
- `main.py`: the command; its exit codes are the verdict's (configsync.plan.EXIT_CODES), 2 for a
  bad invocation. docs/plan.md says what each means.
"""
