"""The verdict on a change set before anything reaches the target: our checks, Slurm's own parser, the
restart table, what the workers would refuse, the jobs at risk, then the dry run."""
