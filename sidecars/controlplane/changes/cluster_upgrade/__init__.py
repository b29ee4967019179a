"""The whole-cluster upgrade in Slurm's order (slurmdbd, slurmctld, the workers): its stages
(stages.py), run one at a time as a named task (run.py), each stage's started daemon judged
(verify.py), within Slurm's upgrade window (window.py), slurmdbd's queue taken first (queue.py),
the status kept (status.py, store.py) and told as Events (events.py)."""
