"""config-sync for slurmrestd (`config-sync --daemon slurmrestd`): its slurm.conf from a ConfigMap and
its JWT key from a Secret, checked (check.py, key.py), staged 0400 for slurmrestd's user, and applied
by a restart that drops no request in flight: the pod stops being ready, the connections still open on
slurmrestd's port are waited out, then slurmrestd is restarted (drain.py, inflight.py); replicas take
turns at it, one at a time, where a Lease is named for the turn (turns.py)."""
