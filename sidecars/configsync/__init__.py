"""config-sync: apply ConfigMap/Secret changes to slurmctld (or slurmdbd) in place, validated first,
verified after, rolled back to the last known good set when Slurm refuses them.

The wings, highest first (a wing imports only from wings below it; `lint-imports` checks it):

- main.py: the command (flags, HTTP face, watcher, the sync loop); guard/: config-guard, which makes
  slurmctld's start read only a verified set.
- restd/: slurmrestd's strategy (its checks, the drained restart, the replicas' turns).
- plans/: what a set would do, judged without applying it (offline, and /v1/plan); slurmdbd/:
  slurmdbd's strategy (its check by a throwaway slurmdbd, its apply and rollback).
- service/: the one daemon: one change set at a time from the sources to a verified daemon
  (daemon.py), its state owned in one place (state.py) and handed to the installer (installing.py)
  and the reporter (reporting.py); slurmctld's apply (ctld.py), another daemon's as a strategy
  (strategy.py).
- ha/: controller pods in HA: who writes, the rollout to every pod, no controller in control, a
  returning pod's gate.
- holds/: the Slurm states (and policies) under which a judged change waits: one module per rule,
  listed in `holds.RULES`.
- judge/: the verdict: our checks, Slurm's own parser, the restart table, what the workers would
  refuse, the jobs at risk, then the dry run.
- dryrun/: a throwaway slurmctld of the same release on the candidate and a copy of the live state;
  apply/: reconfigure or restart the live slurmctld, verify it and its workers, judge the harm, keep
  the run-time node state.
- report/: what is said of each outcome: history, metrics, Events, logs.
- fileset/: the set's files: read and hashed (skipping `..*`), parsed, staged by one rename.
- settings.py, peers.py, tokenwatch.py: the flags and what they parse.

Its outcomes and states on the wire are `sidecars.protocol.configsync`.

Deployment notes: the target must be a directory shared with slurmctld (an emptyDir), not the
ConfigMap mount itself; its files become links `name -> ..current/name` into the generation directory
that `..current` names. --state-dir should outlive the sidecar container (an emptyDir or a volume).
"""
