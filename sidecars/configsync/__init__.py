"""config-sync: apply ConfigMap/Secret changes to slurmctld in place, validated first, verified after,
rolled back to the last known good set when Slurm refuses them.

One change set travels: sources.py (read the volumes, hash names+contents, skip `..*`) -> watch.py
(events only wake the loop; a timer re-hashes too) -> validate.py (our checks, then Slurm's own
parser on a staged copy, then restart.py's table, then dryrun.py: a throwaway slurmctld of the same
release on the candidate and a copy of the live state, and jobs.py: what it would do to jobs) ->
stage.py (one rename swaps the whole set into the target) -> apply.py (reconfigure or restart,
then verify what slurmctld reports) -> service.py (status, metrics, events, rollback, last known
good under --state-dir) -> main.py (the daemon).

Deployment notes: the target must be a directory shared with slurmctld (an emptyDir), not the
ConfigMap mount itself; its files become links `name -> ..current/name` into the generation directory
that `..current` names. --state-dir should outlive the sidecar container (an emptyDir or a volume).
"""
